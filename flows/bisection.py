"""The bisect flow (`specwatch bisect FILE`): which version of an ordered list of images changed a metric.

Each step is the A/B flow as a subflow (the same tasks: images, checkpoint, launches in counterbalanced
rounds under the cluster lock, ingest, checks, report), on an experiment built from the bisect file
(specwatch/bisect/steps.py). The search (specwatch/analysis/bisection.py) picks each next A/B from the
calls so far. The bisect's record is stored after every step: a step that fails or a flow that stops keeps
every A/B measured before it, each A/B is a stored run of its own.

Not `flows/bisect.py`: Prefect puts a deployment's flow directory on sys.path, and a module named `bisect`
there shadows the standard library's (which `random` imports), so every spawned client process of a
deployed run died on import.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from pydantic import BaseModel

from flows.ab import ab, stop_servers
from specwatch import paths
from specwatch.analysis.bisection import next_pair, survey
from specwatch.bisect.record import BisectRecord, conclude, new_record, step_record
from specwatch.bisect.steps import resolve_bisect, step_experiment
from specwatch.engine import processes
from specwatch.runid import new_run_id
from specwatch.spec import BisectSpec, SpecError
from specwatch.store.db import DatabaseError
from specwatch.store.priors import RunFacts, priors_for
from tasks.bisection import store_bisect, write_bisect_report


class BisectOutcome(BaseModel):
    record: BisectRecord | None = None
    report: Path | None = None
    db_path: Path
    exit_code: int  # 0 a culprit or several changes named, 1 could not bisect, 4 no culprit confirmed
    error: str | None = None


@flow(name="specwatch-bisect", on_cancellation=[stop_servers], on_crashed=[stop_servers], log_prints=True)
def bisect(spec: BisectSpec, db: str | None = None, bisect_file: str | None = None,
           cluster: str = "local") -> BisectOutcome:
    """Re-measure the endpoints, then A/B midpoints until adjacent versions differ, verify each culprit."""
    logger = get_run_logger()
    db_path = Path(db).expanduser() if db else paths.default_db()
    try:  # Prefect only parsed it: a bad spec from the UI fails before anything runs
        spec = resolve_bisect(spec)
    except SpecError as exc:
        return BisectOutcome(db_path=db_path, exit_code=1, error=f"{exc.source}: {'; '.join(exc.problems)}")
    processes.install_signal_handlers()
    record = new_record(spec, new_run_id()).model_copy(update={"flow_run_id": str(flow_run.id)})
    folder = paths.bisects_dir() / record.bisect_id
    logger.info("bisect %s: %d images %s .. %s, metric %s on %s; %s", record.bisect_id, len(record.images),
                record.versions[0], record.versions[-1], record.metric, ", ".join(record.cells),
                record.error_statement)
    error = None
    while (pair := next_pair(record.images, record.calls(), record.max_steps)) is not None:
        step = step_experiment(spec, pair)
        logger.info("bisect %s step %d (%s): %s against %s", record.bisect_id, len(record.steps) + 1, pair.kind,
                    record.images[pair.newer], record.images[pair.older])
        run = ab(step, db=str(db_path), experiment_file=bisect_file, cluster=cluster)
        if run.error:  # not an image that failed (that is a step outcome): the bisect cannot go on
            error = f"step {len(record.steps) + 1} ({step.name}): {run.error}"
            break
        result = run.result
        assert result is not None, "an outcome without an error carries its run's record"
        done = step_record(record, pair, step, result, priors_for(db_path, step, RunFacts.of(result)))
        record = record.model_copy(update={"steps": [*record.steps, done]})
        logger.info("bisect %s step %d: %s (%s)", record.bisect_id, done.step, done.outcome, done.reason)
        try:
            store_bisect(db_path, record)
        except DatabaseError as exc:
            error = f"{exc}; the steps so far are in {folder / 'bisect.json'}"
            break
    record = conclude(record, survey(record.images, record.calls(), record.max_steps))
    if error:
        record = record.model_copy(update={"status": "error", "headline": f"stopped: {error}"})
    report = write_bisect_report(record, folder)
    try:
        store_bisect(db_path, record)
    except DatabaseError as exc:
        error = error or f"{exc}; the bisect is in {folder / 'bisect.json'}"
    logger.info("bisect %s: %s; report %s", record.bisect_id, record.headline, report)
    code = 1 if error or record.status == "stopped" else 0 if record.culprits else 4
    return BisectOutcome(record=record, report=report, db_path=db_path, exit_code=code, error=error)
