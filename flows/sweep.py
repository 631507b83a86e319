"""The context-length sweep: per arm, in rounds as the A/B runs them, each depth's warm-up and
timed single-stream runs -> ingest -> sanity, sweep and history checks -> sweep report.

It reuses the A/B flow's runner (specwatch/engine/experiment.py: images, checkpoint, launches in
counterbalanced round order) and its end (specwatch/engine/ending.py, with the sweep's checks and report
in place of a verdict); only what a launch measures differs (specwatch/bench/sweep.py).
Depth-agnostic: the depths come from the file, or from the server's max_model_len.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger
from prefect.runtime import flow_run

from flows.ab import RunOutcome, conducted, stop_servers
from specwatch import paths
from specwatch.engine import processes
from specwatch.engine.experiment import new_result
from specwatch.resolve import load_spec, resolve
from specwatch.runid import new_run_id
from specwatch.spec import ExperimentSpec, SpecError, SweepSpec


@flow(name="specwatch-sweep", on_cancellation=[stop_servers], on_crashed=[stop_servers], log_prints=True)
def sweep(
    experiment: ExperimentSpec | None = None, experiment_file: str | None = None, db: str | None = None,
    cluster: str = "local",
) -> RunOutcome:
    """Sweep context depth per arm (the file's `sweep:` section, else its defaults); store, check, report.

    `experiment` or `experiment_file` (a scheduled deployment passes the file)."""
    logger = get_run_logger()
    processes.install_signal_handlers()
    run_id = new_run_id()
    run_dir = paths.runs_dir() / run_id
    db_path = Path(db).expanduser() if db else paths.default_db()
    try:  # Prefect only parsed `experiment`: a bad spec from the UI fails here, before anything runs
        spec = resolve(experiment) if experiment is not None else load_spec(Path(experiment_file or ""))
    except SpecError as exc:
        return RunOutcome(run_id=run_id, run_dir=run_dir, db_path=db_path, exit_code=1, headline="could not run",
                          error=f"{exc.source}: {'; '.join(exc.problems)}")
    plan = spec.sweep or SweepSpec()
    run_dir.mkdir(parents=True, exist_ok=True)
    logger.info("sweep %s: %d arm(s), depths %s, results in %s", run_id, len(spec.arms),
                plan.depths or "powers of two up to max_model_len", run_dir)
    result = new_result(spec, run_id, experiment_file)
    result.flow_run_id = flow_run.id
    return conducted(spec, result, run_dir, db_path, cluster, sweep=plan)
