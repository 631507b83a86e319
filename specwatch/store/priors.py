"""Launch variances learned before a run (issue 22, deliverable 4): what A/A calibrations stored in
`variance_priors` (sql/migrations/016_variance_priors.sql), and the priors a run may use.

A variance is comparable between runs only on the same platform, CPU or GPU model and count, image and
model (`VarianceKey`); it is never keyed by hostname, since GPU hosts are fresh machines. The key is
read from the run's facts (`RunFacts`), known once its images are built and its checkpoint is checked,
before the first launch: that is when the runner asks `priors_for`. Calibrations travel as files too
(specwatch/store/prior_file.py): one named by design.variance_from, or those shipped in specwatch/priors/.

The key's image is the baseline arm's: an A/A of the baseline is what a calibration usually runs.
It can understate a candidate's variance (docs/verdict.md); sequential.decide's F check drops a prior
the run's own rounds disagree with.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pandas as pd

from specwatch.analysis.calibration import MeasuredVariance, launch_variances
from specwatch.analysis.sequential import COMPOSITE, PriorVariance
from specwatch.analysis.verdict import declared_levels
from specwatch.bench.runner import cell_keys
from specwatch.calibrate import slots
from specwatch.engine.platforms import platform_of
from specwatch.records import CheckpointFacts, HostFacts, ImageRef, RecordedPrior, RunResult
from specwatch.spec import ExperimentSpec
from specwatch.store import db
from specwatch.store.prior_file import SHIPPED, PriorFile, read_prior_file, shipped
from specwatch.store.prior_key import PriorError, VarianceKey, key_differences

# The cell id of a metric's composite in `priors_for`'s mapping and in the table: sequential's reserved
# name, so that a prior's key is the unit's (cell, metric) in the decision's results.
COMPOSITE_CELL = COMPOSITE


@dataclass(frozen=True)
class RunFacts:
    """What a run's VarianceKey is read from: this host, the images as built, the checkpoint as checked."""

    host: HostFacts
    images: Mapping[str, ImageRef]  # by image name (ExperimentSpec.images)
    checkpoint: CheckpointFacts | None  # None: an endpoint-only run

    @classmethod
    def of(cls, result: RunResult) -> RunFacts:
        """A finished run's facts (its launches carry the images they ran)."""
        images = {a.image: a.image_ref for a in result.arms if a.image_ref is not None}
        return cls(result.provenance.host, images, result.checkpoint)


@dataclass(frozen=True)
class _Stored:
    """One calibration's variance of one cell and metric, from the table or a file."""

    label: str  # how the report names its calibration
    run_id: str
    cell: str
    metric: str
    composite_of: str | None
    sd: float
    df: int
    measured_at: datetime


def variance_key(spec: ExperimentSpec, facts: RunFacts) -> VarianceKey | None:
    """The run's key; None when the baseline arm's image was not built (nothing to compare then)."""
    ref = facts.images.get(spec.arm(spec.baseline).image)
    if ref is None:
        return None
    platform = platform_of(ref.package).name
    host = facts.host
    gpu = platform == "gpu"
    hardware = (host.gpu_model if gpu else host.cpu_model) or "unknown"
    count = (host.gpu_count if gpu else host.cpu_count) or 0
    ckpt = facts.checkpoint
    model = "none" if ckpt is None else ckpt.config_sha256 + (f"+gguf:{ckpt.source.gguf_sha256}" if ckpt.source else "")
    return VarianceKey(platform, hardware, count, ref.digest or ref.url or ref.name, model)


def judged_cells(spec: ExperimentSpec) -> tuple[str, ...]:
    """The cell ids a run's composite averages: the workload's cells at the levels the verdict counts."""
    levels = set(declared_levels(spec))
    return tuple(sorted(k.id for k in cell_keys(spec.workload) if k.level in levels))


def store_calibration(db_path: Path, aa: ExperimentSpec, result: RunResult, arm: str) -> list[MeasuredVariance]:
    """Measure an A/A run's launch variances and store them under its key (replacing the run's earlier rows).

    `aa` is the A/A experiment (specwatch.calibrate.aa_spec) and `arm` the arm it calibrated."""
    key = variance_key(aa, RunFacts.of(result))
    if key is None:
        raise PriorError(f"run {result.run_id}: arm {aa.baseline!r} has no built image, so its variance has no "
                         "key; fix: calibrate again once its image builds")
    measured = launch_variances(result, *slots(aa), composite_cells=judged_cells(aa))
    if not measured:
        raise PriorError(f"run {result.run_id}: no cell was measured by both slots in 2 or more rounds (failed "
                         "launches or rejected cells: see its report); fix: calibrate again with more rounds")
    now = datetime.now(UTC)
    rows = pd.DataFrame([{**asdict(key), "cell": v.cell, "metric": v.metric, "sd": v.sd, "df": v.df,
                          "composite_of": " ".join(v.composite_of) or None,
                          "run_id": result.run_id, "arm": arm, "measured_at": now} for v in measured])
    con = db.connect(db_path)
    try:
        con.begin()
        con.execute(db.load_sql("priors/delete_run.sql"), {"run_id": result.run_id})
        db.append(con, "variance_priors", rows)
        con.commit()
    except duckdb.Error as exc:
        with contextlib.suppress(duckdb.Error):  # a failed commit has ended the transaction already
            con.rollback()
        raise db.DatabaseError(f"cannot store the variances of run {result.run_id} in {db_path}: "
                               f"{db.one_line(exc)}") from None
    finally:
        con.close()
    return measured


def priors_for(db_path: Path, spec: ExperimentSpec, facts: RunFacts,
               library: Path = SHIPPED) -> dict[tuple[str, str], PriorVariance]:
    """The stored launch variances this run may use, keyed (cell id, metric name); a metric's composite
    under (COMPOSITE_CELL, metric).

    Only calibrations whose VarianceKey equals this run's count: those in the table and the variance files
    shipped in `library` (a file whose calibration is also in the table counts once). Several are pooled
    (df-weighted variance, df summed). A composite is returned only when its calibration averaged the same
    cells as this run's composite (judged_cells). `design.variance_from` names one calibration, a run id or
    an exported file (`*.json`), and no other is used; PriorError says which key part differs when it was
    measured elsewhere. Whether a prior is then used (enough pooled df, the F check) is sequential.decide's.
    """
    key = variance_key(spec, facts)
    named = spec.design.variance_from
    if key is None:
        return {}
    field = f"design.variance_from={named!r}"
    if named is not None and _is_variance_file(named):
        stored = _file_rows(Path(named), read_prior_file(Path(named), field), key, field)
    else:
        stored = _table_rows(db_path, key, named)
        if named is None:
            seen = {r.run_id for r in stored}
            stored += [r for path, f in shipped(library) if f.variance_key == key
                       for r in _file_rows(path, f, key, field) if r.run_id not in seen]
    return _pooled(stored, " ".join(judged_cells(spec)))


def _is_variance_file(named: str) -> bool:
    """design.variance_from names an exported file, not a run id (run ids never end in .json)."""
    return named.endswith(".json")


def _table_rows(db_path: Path, key: VarianceKey, named: str | None) -> list[_Stored]:
    if not db_path.exists():
        if named is not None:
            raise _no_calibration(named, db_path)
        return []
    con = db.connect(db_path)
    try:
        if named is not None:
            _check_named(con, named, key, db_path)
        rows = db.query_df(con, db.load_sql("priors/for_key.sql"), {**asdict(key), "run_id": named})
    finally:
        con.close()
    return [_Stored(str(r.run_id), str(r.run_id), str(r.cell), str(r.metric),
                    None if pd.isna(r.composite_of) else str(r.composite_of), float(r.sd), int(r.df),
                    pd.Timestamp(r.measured_at).to_pydatetime()) for r in rows.itertuples(index=False)]


def _file_rows(path: Path, f: PriorFile, key: VarianceKey, field: str) -> list[_Stored]:
    """A variance file's rows; PriorError when it was measured under another key (only a named file can be)."""
    if differ := key_differences(f.variance_key, key):
        raise PriorError(f"{field}: that calibration (run {f.run_id}, arm {f.arm!r}) was measured with another "
                         f"key: {'; '.join(differ)}; fix: calibrate on this kind of host (`specwatch calibrate "
                         "FILE --arm BASELINE`, then `specwatch export-variance`) and name that, or remove "
                         "design.variance_from")
    label = f"{f.run_id} (file {path.name})"
    return [_Stored(label, f.run_id, v.cell, v.metric, v.composite_of, v.sd, v.df, f.measured_at)
            for v in f.variances if v.df > 0]


def _pooled(stored: list[_Stored], cells: str) -> dict[tuple[str, str], PriorVariance]:
    groups: dict[tuple[str, str], list[_Stored]] = {}
    for r in stored:
        if r.cell == COMPOSITE_CELL and r.composite_of != cells:
            continue  # a composite over other cells has another variance
        groups.setdefault((r.cell, r.metric), []).append(r)
    out: dict[tuple[str, str], PriorVariance] = {}
    for unit, rs in sorted(groups.items()):
        df = sum(r.df for r in rs)
        sd = math.sqrt(sum(r.df * r.sd**2 for r in rs) / df)
        labels = ", ".join(sorted({r.label for r in rs}))
        when = max(r.measured_at for r in rs).strftime("%Y-%m-%d")
        out[unit] = PriorVariance(sd, df, f"A/A calibration {labels} (latest {when})")
    return out


def _no_calibration(run_id: str, db_path: Path) -> PriorError:
    return PriorError(f"design.variance_from={run_id!r}: no calibration with that run id in {db_path}; fix: run "
                      "`specwatch calibrate FILE --arm BASELINE` and name its run id (or its exported file), or "
                      "remove design.variance_from")


def _check_named(con: duckdb.DuckDBPyConnection, run_id: str, key: VarianceKey, db_path: Path) -> None:
    """PriorError unless `run_id` is a calibration stored under `key`."""
    stored = con.execute(db.load_sql("priors/run_key.sql"), {"run_id": run_id}).fetchall()
    field = f"design.variance_from={run_id!r}"
    if not stored:
        raise _no_calibration(run_id, db_path)
    if differ := key_differences(VarianceKey(*stored[0][:5]), key):
        raise PriorError(f"{field}: that calibration (arm {stored[0][5]!r}) was measured with another key: "
                         f"{'; '.join(differ)}; fix: calibrate with this run's platform, hardware, image and model "
                         "(`specwatch calibrate FILE --arm BASELINE` on this kind of host) and name that run, or "
                         "remove design.variance_from")


def recorded(priors: Mapping[tuple[str, str], PriorVariance]) -> list[RecordedPrior]:
    """`priors_for`'s answer as the run keeps it (RunResult.variance_priors)."""
    return [RecordedPrior(cell=cell, metric=metric, sd=p.sd, df=p.df, source=p.source)
            for (cell, metric), p in sorted(priors.items())]


def run_priors(db_path: Path, spec: ExperimentSpec, result: RunResult) -> dict[tuple[str, str], PriorVariance]:
    """The stored variances a run's looks read: those it recorded before its first launch; for a run
    recorded before runs kept them, the ones stored now."""
    if result.variance_priors is None:
        return priors_for(db_path, spec, RunFacts.of(result))
    return {(p.cell, p.metric): PriorVariance(p.sd, p.df, p.source) for p in result.variance_priors}
