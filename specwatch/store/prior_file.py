"""A calibration's launch variances as a file, so they can travel: `specwatch export-variance RUN_ID FILE`
writes one from the `variance_priors` table, `design.variance_from: FILE.json` names one, and the files
shipped in specwatch/priors/ are a library every run consults, used only where their key equals the run's
(specwatch/store/priors.py). The demo's A/A variance ships this way: measured once on a 2-core CPU host,
it applies to another host only when the platform, CPU model and count, image digest and model all match.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError

from specwatch.store import db
from specwatch.store.prior_key import PriorError, VarianceKey

FORMAT = "specwatch-variance/1"
SHIPPED = Path(__file__).resolve().parents[1] / "priors"  # package data: specwatch/priors/*.json


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FileKey(_Strict):
    platform: str
    hardware: str
    hardware_count: int
    image: str
    model: str


class FileVariance(_Strict):
    cell: str  # CellKey.id, or 'composite'
    metric: str
    sd: float
    df: int
    composite_of: str | None = None  # 'composite' rows: the averaged cell ids, sorted, space-separated


class PriorFile(_Strict):
    format: str = FORMAT
    run_id: str  # the A/A run it was measured by
    arm: str  # the arm that ran in every slot
    measured_at: datetime
    key: FileKey
    variances: list[FileVariance]

    @property
    def variance_key(self) -> VarianceKey:
        return VarianceKey(**self.key.model_dump())


def export_calibration(db_path: Path, run_id: str, out: Path) -> PriorFile:
    """Write calibration `run_id`'s stored variances and key to `out` (JSON); PriorError when it has none."""
    con = db.connect(db_path, read_only=True)
    try:
        rows = db.query_df(con, db.load_sql("priors/run_rows.sql"), {"run_id": run_id})
    finally:
        con.close()
    if rows.empty:
        raise PriorError(f"run {run_id!r}: no calibration with that run id in {db_path}; fix: name a run that "
                         "`specwatch calibrate` stored (its last table names it)")
    first = rows.iloc[0]
    key = FileKey(platform=first.platform, hardware=first.hardware, hardware_count=int(first.hardware_count),
                  image=first.image, model=first.model)
    variances = [FileVariance(cell=r.cell, metric=r.metric, sd=float(r.sd), df=int(r.df),
                              composite_of=None if pd.isna(r.composite_of) else r.composite_of)
                 for r in rows.itertuples(index=False)]
    made = PriorFile(run_id=run_id, arm=str(first.arm), measured_at=pd.Timestamp(first.measured_at).to_pydatetime(),
                     key=key, variances=variances)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(made.model_dump(mode="json"), indent=1) + "\n")
    return made


def read_prior_file(path: Path, field: str) -> PriorFile:
    """The variances in `path`; PriorError (one line, naming `field`) when it is missing or no variance file."""
    fix = "fix: write it with `specwatch export-variance RUN_ID FILE` or name a calibration's run id"
    try:
        got = PriorFile.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise PriorError(f"{field}: cannot read {path} ({exc.strerror or exc}); {fix}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "the file"
        raise PriorError(f"{field}: {path} is not a variance file ({where}: {err['msg']}); {fix}") from None
    if got.format != FORMAT:
        raise PriorError(f"{field}: {path} has format {got.format!r}, this specwatch reads {FORMAT!r}; {fix}")
    return got


def shipped(library: Path = SHIPPED) -> list[tuple[Path, PriorFile]]:
    """The variance files shipped in `library`, by name."""
    return [(p, read_prior_file(p, f"shipped variance {p.name}")) for p in sorted(library.glob("*.json"))]
