"""The A/B flow: images -> checkpoint -> arms (one after another, one host) -> ingest -> quality -> report.

Thin on purpose: it decides order and what a failure means; the stages live in `tasks/`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.concurrency.sync import concurrency
from prefect.runtime import flow_run
from pydantic import BaseModel

import specwatch
from flows.failures import tracebacks_to
from specwatch import paths, ranks
from specwatch.analysis.adaptive import adaptive_decision
from specwatch.analysis.blocks import block_order
from specwatch.analysis.verdict import assess, compare_cells, confidence_for, decision_records
from specwatch.engine import orphans, processes
from specwatch.engine.checkpoint import CheckpointError
from specwatch.engine.images import ImageError, python_of
from specwatch.engine.launchers import LaunchContext
from specwatch.host import host_facts
from specwatch.records import ArmResult, CellResult, CheckpointFacts, ImageRef, Provenance, RunResult
from specwatch.report.rows import VerdictRow, headline, verdict_rows
from specwatch.runid import new_run_id
from specwatch.spec import ArmSpec, ExperimentSpec, SweepSpec
from specwatch.store.db import DatabaseError
from specwatch.store.ingest import ingest
from specwatch.store.rundir import read_raw, resume_conflicts, write_raw
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
    reasons: list[str] = []  # what the verdict table does not show (it holds the per-cell verdicts)
    rows: list[VerdictRow] = []
    error: str | None = None


def stop_servers(flow: Any, flow_run: Any, state: Any) -> None:
    processes.stop_all()


def _images(spec: ExperimentSpec, run_dir: Path) -> tuple[dict[str, ImageRef], dict[str, str]]:
    """Build every image an arm uses; a failed build fails its arms, not the run. Build logs are
    copied into the run dir, beside what the images produced."""
    refs, errors = {}, {}
    for name in dict.fromkeys(a.image for a in spec.arms):
        try:
            refs[name] = build_image(spec.image(name))
        except ImageError as exc:
            errors[name] = str(exc)
            continue
        log = refs[name].build_log
        if log is not None and log.is_file():
            (run_dir / "images").mkdir(parents=True, exist_ok=True)
            shutil.copy2(log, run_dir / "images" / f"{name}.build.log")
    return refs, errors


def _checkpoint(spec: ExperimentSpec, refs: dict[str, ImageRef]) -> CheckpointFacts | None:
    """Generate or convert (if asked) and check the checkpoint; an endpoint-only run serves its own weights.
    A packaged model comes from the images' wheelhouses when they have one (an offline host)."""
    python = next((p for r in refs.values() if (p := python_of(r)) is not None), None)
    if python is None and spec.model.path is None:
        return None
    wheelhouses = [i.wheelhouse.expanduser() for i in spec.images if i.wheelhouse is not None]
    return prepare_checkpoint(spec.model, python, wheelhouses or None)


class ResumeRefused(Exception):
    """A resumed run's earlier launches measured other images or another checkpoint."""


UNFINISHED = "unfinished: the flow stopped during this launch"


def _failed(arm: ArmSpec, block: int, reason: str) -> ArmResult:
    now = datetime.now(UTC)
    return ArmResult(name=arm.name, block=block, image=arm.image, k=arm.k, status="failed", reason=reason,
                     method=arm.speculative.method if arm.speculative else None, started_at=now, ended_at=now)


class _Blocks:
    """Runs one launch of one arm and records it; a k-ladder's outcome sticks for later blocks."""

    def __init__(self, spec: ExperimentSpec, result: RunResult, run_dir: Path, refs: dict[str, ImageRef],
                 image_errors: dict[str, str], model_dir: Path, facts: CheckpointFacts | None,
                 sweep: SweepSpec | None = None) -> None:
        self.spec, self.result, self.run_dir = spec, result, run_dir
        self.refs, self.image_errors = refs, image_errors
        self.model_dir, self.facts = model_dir, facts
        self.sweep = sweep
        self.resolved: dict[str, ArmSpec] = {}
        self.done = {(a.name, a.block) for a in result.arms}  # a resumed run's finished launches
        for a in result.arms:  # a k-ladder's outcome sticks across the resume too
            if a.status == "ok" and a.k != self.spec.arm(a.name).k:
                self.resolved[a.name] = self.spec.arm(a.name).with_k(a.k)

    def run(self, name: str, block: int) -> None:
        logger = get_run_logger()
        if (name, block) in self.done:
            logger.info("arm %s block %d: finished before the resume; kept, not run again", name, block)
            return
        arm = self.resolved.get(name) or self.spec.arm(name)
        if arm.image in self.image_errors:
            self.result.arms.append(_failed(arm, block, f"image {arm.image}: {self.image_errors[arm.image]}"))
            return
        for line in orphans.sweep():  # servers a killed run left behind hold the machine: stop them first
            logger.warning("%s", line)
        host = {h.name: h for h in self.spec.hosts}.get(arm.host)  # None: this machine
        ctx = LaunchContext(model_dir=self.model_dir, served_name=self.spec.served_name,
                            arm_dir=self.run_dir / "arms" / f"{name}-b{block}",
                            max_model_len=self.spec.model.max_model_len, run_id=self.result.run_id,
                            launch_name=f"{self.result.run_id}-{name}-b{block}",
                            ranks=tuple(ranks.render(arm, {h.name: h for h in self.spec.hosts})),
                            host=host.address if host else "127.0.0.1", ssh=ranks.route_to(host),
                            netns=host.netns if host else None, max_concurrency=self.spec.workload.max_streams)
        logger.info("arm %s block %d: launching (image %s, k=%s)", name, block, arm.image, arm.k)
        # In results.json while it runs: a flow killed mid-launch keeps the cells it finished.
        running = _failed(arm, block, UNFINISHED).model_copy(update={"in_progress": True})
        self.result.arms.append(running)

        def on_cell(cell: CellResult) -> None:
            running.cells.append(cell)
            write_raw(self.result, self.run_dir)

        outcome = launch_arm(arm, self.spec, self.refs[arm.image], ctx, self.facts,
                             namespace=f"{self.result.run_id}:{name}:b{block}", block=block, on_cell=on_cell,
                             sweep=self.sweep)
        self.result.arms.remove(running)
        if outcome.status == "ok" and outcome.k != arm.k:
            self.resolved[name] = arm.with_k(outcome.k)
        rejected = sum(c.rejected for c in outcome.cells)
        logger.info("arm %s block %d: %s, %d cell(s), %d rejected%s", name, block, outcome.status,
                    len(outcome.cells), rejected, f" ({outcome.reason})" if outcome.reason else "")
        self.result.arms.append(outcome)
        write_raw(self.result, self.run_dir)  # each finished launch is on disk before the next one starts


def measure(spec: ExperimentSpec, result: RunResult, run_dir: Path, sweep: SweepSpec | None = None) -> None:
    """Images, checkpoint, then every launch in the counterbalanced order (and adaptive rounds).

    `sweep`: each launch measures the context-length sweep instead of the workload's cells (flows/sweep.py).
    """
    logger = get_run_logger()
    refs, image_errors = _images(spec, run_dir)
    facts = _checkpoint(spec, refs)
    if problems := resume_conflicts(result, {n: r.digest for n, r in refs.items()}, facts):
        raise ResumeRefused(f"cannot resume run {result.run_id}: {'; '.join(problems)}; start a new run instead")
    result.checkpoint = facts
    model_dir = facts.path if facts else Path(spec.served_name)
    blocks = _Blocks(spec, result, run_dir, refs, image_errors, model_dir, facts, sweep)
    names = [a.name for a in spec.arms]
    for arm_name, block in block_order(names, spec.design.blocks):
        blocks.run(arm_name, block)
    done = spec.design.blocks
    while spec.design.adaptive:
        cis = {(c.arm, c.key, c.metric): c.ci for c in compare_cells(result, spec, confidence_for(spec))}
        step = adaptive_decision(cis, spec.thresholds.noise_band, done, spec.design.blocks,
                                       spec.design.max_blocks or done)
        logger.info("adaptive stopping after %d block(s) per arm: %s", done, step.reason)
        if not step.add_block:
            return
        done += 1
        for arm_name, block in block_order(names, done):
            if block == done:
                blocks.run(arm_name, block)


def _keep_partial(result: RunResult, run_dir: Path, db_path: Path, exc: BaseException) -> None:
    logger = get_run_logger()
    result.ended_at = datetime.now(UTC)
    result.interrupted = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    for arm in result.arms:
        if arm.in_progress:
            arm.reason, arm.ended_at = f"interrupted during this launch ({result.interrupted})", result.ended_at
    write_raw(result, run_dir)
    try:
        ingest(result, db_path)  # not the task: a cancelled flow runs no new tasks
    except DatabaseError as db_exc:
        logger.error("partial run %s not stored (%s); load it later with `specwatch ingest %s`", result.run_id,
                     db_exc, run_dir)
        return
    logger.warning("run %s interrupted (%s): %d launch(es) kept, stored as a partial run", result.run_id,
                   result.interrupted, len(result.arms))


def measure_guarded(spec: ExperimentSpec, result: RunResult, run_dir: Path, db_path: Path, cluster: str,
                    sweep: SweepSpec | None = None) -> RunOutcome | None:
    """`measure` under the cluster and run locks. Returns the outcome of a run that could not go on
    (None when it may be stored and checked); an interrupt is stored as a partial run and raised."""
    run_id = result.run_id
    try:
        with cluster_lock(cluster), orphans.run_lock(run_id):
            measure(spec, result, run_dir, sweep)
    except CheckpointError as exc:
        result.ended_at = datetime.now(UTC)
        write_raw(result, run_dir)
        return RunOutcome(run_id=run_id, run_dir=run_dir, db_path=db_path, exit_code=1,
                          headline="could not run", error=f"checkpoint: {exc}")
    except ResumeRefused as exc:  # results.json stays as it was
        return RunOutcome(run_id=run_id, run_dir=run_dir, db_path=db_path, exit_code=1,
                          headline="could not resume", error=str(exc))
    except BaseException as exc:
        # Ctrl-C / cancellation / SIGTERM: the servers are stopped by now (the launch's `with` unwound);
        # keep what was measured, store it as a partial run, then let the interrupt through.
        _keep_partial(result, run_dir, db_path, exc)
        raise
    result.ended_at = datetime.now(UTC)
    return None


def cluster_lock(cluster: str) -> AbstractContextManager[object]:
    """One run per serving cluster at a time, across runs, via a Prefect global concurrency limit.

    Only against a real Prefect API (`specwatch serve` creates `cluster-<name>`); an ephemeral
    API has no other run to collide with.
    """
    if not os.environ.get("PREFECT_API_URL"):
        return nullcontext()
    return concurrency(f"cluster-{cluster}", occupy=1)


def new_result(spec: ExperimentSpec, run_id: str, experiment_file: str | None) -> RunResult:
    """A run's record before anything ran: the spec as run and where it came from."""
    source = Path(experiment_file) if experiment_file else None
    return RunResult(
        run_id=run_id,
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


def _resumed(run_dir: Path) -> RunResult:
    """A run dir's results so far: its finished launches are kept; one the flow stopped in runs again, whole
    (its cells came from a boot that never finished its block)."""
    logger = get_run_logger()
    result = read_raw(run_dir)
    for arm in [a for a in result.arms if a.in_progress]:
        logger.warning("arm %s block %d: unfinished when the run stopped; its %d cell(s) are dropped and the "
                       "launch runs again", arm.name, arm.block, len(arm.cells))
        result.arms.remove(arm)
    logger.info("resuming run %s: %d finished launch(es) kept", result.run_id, len(result.arms))
    return result.model_copy(update={"interrupted": None, "ended_at": None, "quality": []})


@flow(name="specwatch-ab", on_cancellation=[stop_servers], on_crashed=[stop_servers], log_prints=True)
def ab(
    experiment: ExperimentSpec, db: str | None = None, experiment_file: str | None = None, cluster: str = "local",
    resume: str | None = None,
) -> RunOutcome:
    """Run an experiment's arms in restart blocks, store the results and decide against the baseline arm.

    `resume`: a run id; its run dir's results.json is continued (finished launches skipped), `experiment`
    must be the one stored there (`specwatch run --resume` reads it from there).
    """
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
    result = _resumed(run_dir) if resume else new_result(spec, run_id, experiment_file)
    result.flow_run_id = flow_run.id
    # Before this run's lock is taken: a resumed run's own orphans (its killed flow's servers) are orphans too.
    for line in orphans.sweep():
        logger.warning("%s", line)
    if (stopped := measure_guarded(spec, result, run_dir, db_path, cluster)) is not None:
        return stopped

    baseline = spec.baseline
    try:
        ingest_run(result, run_dir, db_path)
        single_boot = spec.design.blocks == 1 and not spec.design.adaptive
        result.quality = check_quality(db_path, run_id, baseline, spec.thresholds, regression_checks=single_boot)
        assessment = assess(result, spec)
        result.quality += decision_records(assessment, spec)
        # the run's exit code depends on the checks, so its row is rewritten with them
        ingest_run(result, run_dir, db_path, tables=("runs", "quality_results"))
    except DatabaseError as exc:
        write_raw(result, run_dir)
        return RunOutcome(run_id=run_id, run_dir=run_dir, db_path=db_path, exit_code=1, headline="not stored",
                          error=f"{exc}; results kept in {run_dir}, load them with `specwatch ingest {run_dir}`")
    report = write_report(result, run_dir)
    verdict = headline(result, assessment)
    logger.info("run %s: %s; report %s", run_id, verdict, report)
    return RunOutcome(run_id=run_id, run_dir=run_dir, db_path=db_path, exit_code=result.exit_code(),
                      headline=verdict, reasons=assessment.verdict.run_reasons,
                      rows=verdict_rows(result, spec, assessment))
