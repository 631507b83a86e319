"""The A/B flow: images -> checkpoint -> arms (one after another, one host) -> ingest -> quality -> report.

Thin on purpose: it decides order and what a failure means; the stages live in `tasks/`.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from pydantic import BaseModel

import specwatch
from specwatch import paths, processes
from specwatch.db import DatabaseError
from specwatch.host import host_facts
from specwatch.records import ArmResult, CheckpointFacts, ImageRef, Provenance, RunResult
from specwatch.runid import new_run_id
from specwatch.spec import ExperimentSpec
from tasks.arm import LaunchContext, launch_arm
from tasks.checkpoint import CheckpointError, prepare_checkpoint_task
from tasks.image import ImageError, build_image
from tasks.ingest import ingest_task, write_raw
from tasks.quality import check_quality
from tasks.report import headline, report_task


class RunOutcome(BaseModel):
    run_id: str
    run_dir: Path
    db_path: Path
    exit_code: int
    headline: str
    error: str | None = None


def _stop_servers(*_: object) -> None:
    processes.stop_all()


def _images(spec: ExperimentSpec) -> tuple[dict[str, ImageRef], dict[str, str]]:
    """Build every image an arm uses; a failed build fails its arms, not the run."""
    refs, errors = {}, {}
    for name in dict.fromkeys(a.image for a in spec.arms):
        try:
            refs[name] = build_image(spec.image(name))
        except ImageError as exc:
            errors[name] = str(exc)
    return refs, errors


def _checkpoint(spec: ExperimentSpec, refs: dict[str, ImageRef]) -> CheckpointFacts | None:
    """Generate (if asked) and check the checkpoint; an endpoint-only run serves its own weights."""
    python = next((r.python for r in refs.values() if r.python is not None), None)
    if python is None and spec.model.generate is not None:
        return None
    return prepare_checkpoint_task(spec.model, python)


def _failed(name: str, spec: ExperimentSpec, reason: str) -> ArmResult:
    arm = next(a for a in spec.arms if a.name == name)
    now = datetime.now(UTC)
    return ArmResult(name=arm.name, image=arm.image, k=arm.k, status="failed", reason=reason,
                     method=arm.speculative.method if arm.speculative else None, started_at=now, ended_at=now)


@flow(name="specwatch-ab", on_cancellation=[_stop_servers], on_crashed=[_stop_servers], log_prints=True)
def ab(experiment: ExperimentSpec, db: str | None = None, experiment_file: str | None = None) -> RunOutcome:
    """Run every arm of an experiment once, store the results and check them against the baseline arm."""
    logger = get_run_logger()
    processes.install_signal_handlers()
    spec = experiment
    run_id = new_run_id()
    run_dir = paths.runs_dir() / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    db_path = Path(db).expanduser() if db else paths.default_db()
    logger.info("run %s: %d arm(s), results in %s", run_id, len(spec.arms), run_dir)

    source = Path(experiment_file) if experiment_file else None
    result = RunResult(
        run_id=run_id,
        flow_run_id=flow_run.id,
        experiment_name=spec.name,
        experiment=spec.model_dump(mode="json"),
        provenance=Provenance(
            specwatch_version=specwatch.__version__,
            host=host_facts(),
            experiment_file=str(source) if source else None,
            experiment_sha256=hashlib.sha256(source.read_bytes()).hexdigest() if source and source.exists() else None,
        ),
        started_at=datetime.now(UTC),
    )
    try:
        refs, image_errors = _images(spec)
        facts = _checkpoint(spec, refs)
        result.checkpoint = facts
        model_dir = facts.path if facts else Path(spec.served_name)
        for arm in spec.arms:
            if arm.image in image_errors:
                result.arms.append(_failed(arm.name, spec, f"image {arm.image}: {image_errors[arm.image]}"))
                continue
            ctx = LaunchContext(model_dir=model_dir, served_name=spec.served_name,
                                arm_dir=run_dir / "arms" / f"{arm.name}-b1")
            logger.info("arm %s: launching (image %s, k=%s)", arm.name, arm.image, arm.k)
            arm_result = launch_arm(arm, spec, refs[arm.image], ctx, facts, namespace=f"{run_id}:{arm.name}:b1")
            rejected = sum(c.rejected for c in arm_result.cells)
            logger.info("arm %s: %s, %d cell(s), %d rejected%s", arm.name, arm_result.status, len(arm_result.cells),
                        rejected, f" ({arm_result.reason})" if arm_result.reason else "")
            result.arms.append(arm_result)
            write_raw(result, run_dir)  # each finished arm is on disk before the next one starts
    except CheckpointError as exc:
        result.ended_at = datetime.now(UTC)
        write_raw(result, run_dir)
        return RunOutcome(run_id=run_id, run_dir=run_dir, db_path=db_path, exit_code=1,
                          headline="could not run", error=f"checkpoint: {exc}")
    except BaseException:
        # Ctrl-C / cancellation: keep what was measured, then let the interrupt through.
        result.ended_at = datetime.now(UTC)
        write_raw(result, run_dir)
        raise
    result.ended_at = datetime.now(UTC)

    baseline, band = spec.baseline, spec.thresholds.noise_band
    try:
        ingest_task(result, run_dir, db_path)
        result.quality = check_quality(db_path, run_id, baseline, spec.thresholds)
        # the run's exit code depends on the checks, so its row is rewritten with them
        ingest_task(result, run_dir, db_path, tables=("runs", "quality_results"))
    except DatabaseError as exc:
        write_raw(result, run_dir)
        return RunOutcome(run_id=run_id, run_dir=run_dir, db_path=db_path, exit_code=1, headline="not stored",
                          error=f"{exc}; results kept in {run_dir}, load them with `specwatch ingest {run_dir}`")
    report = report_task(result, run_dir, baseline, band)
    logger.info("run %s: %s; report %s", run_id, headline(result), report)
    return RunOutcome(run_id=run_id, run_dir=run_dir, db_path=db_path, exit_code=result.exit_code(),
                      headline=headline(result))
