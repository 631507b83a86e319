"""The A/B flow: images -> checkpoint -> arms (one after another, one host) -> ingest -> quality -> report.

Thin on purpose: it decides order and what a failure means. The stages live in `tasks/`; the launch
order, the adaptive looks, resume and partial runs live in the engine's runner
(specwatch/engine/experiment.py), which gets the stages as Prefect tasks, the run logger and the
cluster lock from here.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.concurrency.sync import concurrency
from prefect.runtime import flow_run
from pydantic import BaseModel

from flows.failures import tracebacks_to
from specwatch import paths
from specwatch.alerts.decided import from_assessment
from specwatch.analysis.verdict import assess, decision_records
from specwatch.engine import processes
from specwatch.engine.checkpoint import CheckpointError
from specwatch.engine.experiment import Hooks, ResumeRefused, new_result, resumed, run_experiment
from specwatch.records import RunResult
from specwatch.report.rows import VerdictRow, headline, verdict_rows
from specwatch.resolve import resolve
from specwatch.runid import new_run_id
from specwatch.spec import ExperimentSpec, SweepSpec
from specwatch.store.db import DatabaseError
from specwatch.store.priors import PriorError, run_priors
from specwatch.store.rundir import write_raw
from tasks.alerts import record_alerts
from tasks.arms import launch_arm
from tasks.checkpoint import prepare_checkpoint
from tasks.images import build_image
from tasks.quality import check_quality
from tasks.report import write_report
from tasks.store import ingest_run


class RunOutcome(BaseModel):
    run_id: str
    run_dir: Path
    db_path: Path
    exit_code: int
    headline: str
    decision: str | None = None  # PROMOTE, REVERT, NO CHANGE or INCONCLUSIVE; None: not decided (could not run)
    reasons: list[str] = []  # what the verdict table does not show (it holds the per-cell verdicts)
    rows: list[VerdictRow] = []
    alerts: list[str] = []  # what the decision did to alerts: opened, counted, verified, reopened
    error: str | None = None


def stop_servers(flow: Any, flow_run: Any, state: Any) -> None:
    processes.stop_all()


def measure_guarded(spec: ExperimentSpec, result: RunResult, run_dir: Path, db_path: Path, cluster: str,
                    sweep: SweepSpec | None = None) -> RunOutcome | None:
    """Every launch of the run, by the engine's runner with the Prefect stages and the cluster's lock.
    Returns the outcome of a run that could not go on (None when it may be stored and checked); an
    interrupt is stored as a partial run and raised."""
    hooks = Hooks(build_image=build_image, prepare_checkpoint=prepare_checkpoint, launch=launch_arm,
                  log=get_run_logger(), cluster_lock=partial(cluster_lock, cluster))
    run_id = result.run_id
    try:
        run_experiment(spec, result, run_dir, db_path, hooks, sweep)
    except CheckpointError as exc:
        return RunOutcome(run_id=run_id, run_dir=run_dir, db_path=db_path, exit_code=1,
                          headline="could not run", error=f"checkpoint: {exc}")
    except PriorError as exc:
        return RunOutcome(run_id=run_id, run_dir=run_dir, db_path=db_path, exit_code=1,
                          headline="could not run", error=str(exc))
    except ResumeRefused as exc:  # results.json stays as it was
        return RunOutcome(run_id=run_id, run_dir=run_dir, db_path=db_path, exit_code=1,
                          headline="could not resume", error=str(exc))
    return None


def cluster_lock(cluster: str) -> AbstractContextManager[object]:
    """One run per serving cluster at a time, across runs, via a Prefect global concurrency limit.

    Only against a real Prefect API (`specwatch serve` creates `cluster-<name>`); an ephemeral
    API has no other run to collide with.
    """
    if not os.environ.get("PREFECT_API_URL"):
        return nullcontext()
    return concurrency(f"cluster-{cluster}", occupy=1)


@flow(name="specwatch-ab", on_cancellation=[stop_servers], on_crashed=[stop_servers], log_prints=True)
def ab(
    experiment: ExperimentSpec, db: str | None = None, experiment_file: str | None = None, cluster: str = "local",
    resume: str | None = None,
) -> RunOutcome:
    """Run an experiment's arms in rounds, store the results and decide against the baseline arm.

    `resume`: a run id; its run dir's results.json is continued (finished launches skipped), `experiment`
    must be the one stored there (`specwatch run --resume` reads it from there).
    """
    experiment = resolve(experiment)  # Prefect only parsed it: a bad spec from the UI fails before anything runs
    processes.install_signal_handlers()
    run_id = resume or new_run_id()
    run_dir = paths.runs_dir() / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    with tracebacks_to(run_dir):
        return _run(experiment, run_id, run_dir, db, experiment_file, cluster, resume)


def _run(spec: ExperimentSpec, run_id: str, run_dir: Path, db: str | None, experiment_file: str | None,
         cluster: str, resume: str | None) -> RunOutcome:
    logger = get_run_logger()
    db_path = Path(db).expanduser() if db else paths.default_db()
    logger.info("run %s: %d arm(s), results in %s", run_id, len(spec.arms), run_dir)
    result = resumed(run_dir, logger) if resume else new_result(spec, run_id, experiment_file)
    result.flow_run_id = flow_run.id
    if (stopped := measure_guarded(spec, result, run_dir, db_path, cluster)) is not None:
        return stopped

    baseline = spec.baseline
    try:
        ingest_run(result, run_dir, db_path)
        single_boot = spec.design.rounds == 1 and not spec.design.adaptive
        result.quality = check_quality(db_path, run_id, baseline, spec.thresholds, regression_checks=single_boot)
        # the one verdict (the checks, the report and the outcome share it), on the variances the looks read
        assessment = assess(result, spec, run_priors(db_path, spec, result))
        result.quality += decision_records(assessment, spec)
        # the run's exit code depends on the checks, so its row is rewritten with them
        ingest_run(result, run_dir, db_path, tables=("runs", "quality_results"))
        changes = record_alerts(db_path, from_assessment(result, spec, assessment))
    except DatabaseError as exc:
        write_raw(result, run_dir)
        return RunOutcome(run_id=run_id, run_dir=run_dir, db_path=db_path, exit_code=1, headline="not stored",
                          error=f"{exc}; results kept in {run_dir}, load them with `specwatch ingest {run_dir}`")
    rows = verdict_rows(result, spec, assessment)  # after the checks: an invalid cell's row says so
    report = write_report(result, run_dir, spec, assessment, rows)
    verdict = headline(result, assessment)
    logger.info("run %s: %s; report %s", run_id, verdict, report)
    return RunOutcome(run_id=run_id, run_dir=run_dir, db_path=db_path, exit_code=result.exit_code(),
                      headline=verdict, decision=assessment.verdict.decision, reasons=assessment.verdict.all_reasons,
                      rows=rows, alerts=[f"alert #{c.alert_id} {c.event}: {c.text}" for c in changes])
