"""The A/B flow: images -> checkpoint -> arms (one after another, one host) -> ingest -> quality -> report.

Thin on purpose: it decides order and what a failure means. The stages live in `tasks/`; the launch
order, the adaptive looks, redos, resume and partial runs live in the engine's runner
(specwatch/engine/experiment.py), and the end of the run (store, check, judge, alert, report) in
specwatch/engine/ending.py; both get the stages as Prefect tasks, the run logger and the cluster lock
from here.
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

from flows.failures import tracebacks_to
from specwatch import paths
from specwatch.engine import processes
from specwatch.engine.ending import EndStages, HistoryBaseline, RunOutcome, conduct
from specwatch.engine.experiment import Hooks, new_result, resumed
from specwatch.records import RunResult
from specwatch.resolve import resolve
from specwatch.runid import new_run_id
from specwatch.spec import ExperimentSpec, SweepSpec
from tasks.alerts import record_alerts
from tasks.arms import launch_arm
from tasks.checkpoint import prepare_checkpoint
from tasks.images import build_image
from tasks.quality import check_history, check_quality, check_sweep
from tasks.report import write_report, write_sweep_report
from tasks.store import ingest_run

__all__ = ["RunOutcome", "ab", "conducted", "stop_servers"]  # RunOutcome: the flows' and the CLI's return type


def stop_servers(flow: Any, flow_run: Any, state: Any) -> None:
    processes.stop_all()


# The end of a run's stages as Prefect tasks (the engine's `end_run` calls them, once, for every flow).
END_STAGES = EndStages(ingest_run=ingest_run, check_quality=check_quality, check_history=check_history,
                       check_sweep=check_sweep, record_alerts=record_alerts, write_report=write_report,
                       write_sweep_report=write_sweep_report)


def conducted(spec: ExperimentSpec, result: RunResult, run_dir: Path, db_path: Path, cluster: str,
              sweep: SweepSpec | None = None, history: HistoryBaseline | None = None) -> RunOutcome:
    """The run from its first launch to its outcome, by the engine with the Prefect stages and the cluster's
    lock (specwatch/engine/ending.py); an interrupt is stored as a partial run and raised."""
    hooks = Hooks(build_image=build_image, prepare_checkpoint=prepare_checkpoint, launch=launch_arm,
                  log=get_run_logger(), cluster_lock=partial(cluster_lock, cluster))
    return conduct(spec, result, run_dir, db_path, hooks, END_STAGES, sweep, history)


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
    resume: str | None = None, history: HistoryBaseline | None = None,
) -> RunOutcome:
    """Run an experiment's arms in rounds, store the results and decide against the baseline arm.

    `resume`: a run id; its run dir's results.json is continued (finished launches skipped), `experiment`
    must be the one stored there (`specwatch run --resume` reads it from there).
    `history`: also check every point against its baseline from history (the nightly), before the verdict.
    """
    experiment = resolve(experiment)  # Prefect only parsed it: a bad spec from the UI fails before anything runs
    processes.install_signal_handlers()
    run_id = resume or new_run_id()
    run_dir = paths.runs_dir() / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    with tracebacks_to(run_dir):
        return _run(experiment, run_id, run_dir, db, experiment_file, cluster, resume, history)


def _run(spec: ExperimentSpec, run_id: str, run_dir: Path, db: str | None, experiment_file: str | None,
         cluster: str, resume: str | None, history: HistoryBaseline | None) -> RunOutcome:
    logger = get_run_logger()
    db_path = Path(db).expanduser() if db else paths.default_db()
    logger.info("run %s: %d arm(s), results in %s", run_id, len(spec.arms), run_dir)
    result = resumed(run_dir, logger) if resume else new_result(spec, run_id, experiment_file)
    result.flow_run_id = flow_run.id
    return conducted(spec, result, run_dir, db_path, cluster, history=history)
