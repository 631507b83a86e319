"""The experiment runner: images, checkpoint, then every launch in counterbalanced round order, with
the looks between rounds (the sequential decision, while undecided), resume and partial runs.

No Prefect here: what is Prefect-bound (the stages as tasks, the run logger, the cluster lock) comes
in as `Hooks`, the way `run_arm` takes its cell `runner=`. The flows decide order and what a failure
means; this module decides which launch runs next and what is on disk when the run stops.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import specwatch
from specwatch import ranks
from specwatch.analysis.pairing import Priors
from specwatch.analysis.rounds import round_order
from specwatch.analysis.verdict import decisions
from specwatch.bench.runner import CellCallback
from specwatch.engine import orphans
from specwatch.engine.checkpoint import CheckpointError, PythonRunner
from specwatch.engine.hostload import busy_line
from specwatch.engine.images import ImageError, model_python
from specwatch.engine.launchers import LaunchContext
from specwatch.engine.launchers.registry import stoppers
from specwatch.engine.namespaces import launch_namespace, nonce_scopes
from specwatch.host import host_facts
from specwatch.records import ArmResult, CellResult, CheckpointFacts, ImageRef, Provenance, Redo, RunResult
from specwatch.spec import ArmSpec, ExperimentSpec, ImageSpec, ModelSpec, SweepSpec
from specwatch.store.db import DatabaseError
from specwatch.store.ingest import ingest
from specwatch.store.priors import PriorError, RunFacts, priors_for, recorded
from specwatch.store.rundir import read_raw, resume_conflicts, write_raw

UNFINISHED = "unfinished: the flow stopped during this launch"


class ResumeRefused(Exception):
    """A resumed run's earlier launches measured other images or another checkpoint."""


class HostBusy(Exception):
    """A launch was contaminated by the host's other work with no redo left (design.max_redos): the run stops,
    stored as a partial run that `--resume` continues."""


class Log(Protocol):
    """What the runner logs through: a stdlib logger, or Prefect's run logger."""

    def info(self, msg: str, *args: object) -> None: ...
    def warning(self, msg: str, *args: object) -> None: ...
    def error(self, msg: str, *args: object) -> None: ...


class Launch(Protocol):
    """One launch of one arm, measured (tasks.arms.launch_arm, over engine.arm.run_arm)."""

    def __call__(self, arm: ArmSpec, spec: ExperimentSpec, image: ImageRef, ctx: LaunchContext,
                 facts: CheckpointFacts | None, namespace: str, round_no: int = 1, on_cell: CellCallback | None = None,
                 sweep: SweepSpec | None = None) -> ArmResult: ...


@dataclass(frozen=True)
class Hooks:
    """The stages and services the runner is handed: the flows pass Prefect tasks, the run logger and a
    Prefect concurrency limit; tests pass plain functions."""

    build_image: Callable[[ImageSpec], ImageRef]
    prepare_checkpoint: Callable[[ModelSpec, PythonRunner | None, list[Path] | None], CheckpointFacts]
    launch: Launch
    log: Log
    # One run per serving cluster at a time; entered around all of a run's launches.
    cluster_lock: Callable[[], AbstractContextManager[object]] = nullcontext


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


def resumed(run_dir: Path, log: Log) -> RunResult:
    """A run dir's results so far: its finished launches are kept; one the flow stopped in runs again, whole
    (its cells came from a boot that never finished its round)."""
    result = read_raw(run_dir)
    for arm in [a for a in result.arms if a.in_progress]:
        log.warning("arm %s round %d: unfinished when the run stopped; its %d cell(s) are dropped and the "
                    "launch runs again", arm.name, arm.round, len(arm.cells))
        result.arms.remove(arm)
    log.info("resuming run %s: %d finished launch(es) kept", result.run_id, len(result.arms))
    return result.model_copy(update={"interrupted": None, "ended_at": None, "quality": []})


def run_experiment(spec: ExperimentSpec, result: RunResult, run_dir: Path, db_path: Path, hooks: Hooks,
                   sweep: SweepSpec | None = None) -> None:
    """Every launch of the run into `result` (and results.json), under the cluster lock and the run's lock.

    `sweep`: each launch measures the context-length sweep instead of the workload's cells (flows/sweep.py).
    The looks between rounds may pool in the variances stored for this run's key in `db_path`
    (store/priors.py: an A/A calibration of the same platform, hardware, image and model).
    Raises CheckpointError or PriorError (the record so far is written) and ResumeRefused (results.json
    stays as it was).
    Any other exception (Ctrl-C, cancellation, SIGTERM) stops the run: what was measured is written and
    stored as a partial run, and the exception goes on.
    """
    # Before this run's lock is taken: a resumed run's own orphans (its killed flow's servers) are orphans too.
    for line in orphans.sweep(stoppers()):
        hooks.log.warning("%s", line)
    try:
        with hooks.cluster_lock(), orphans.run_lock(result.run_id):
            _measure(spec, result, run_dir, db_path, hooks, sweep)
    except (CheckpointError, PriorError):
        result.ended_at = datetime.now(UTC)
        write_raw(result, run_dir)
        raise
    except ResumeRefused:  # nothing of this attempt ran: results.json stays as it was
        raise
    except BaseException as exc:
        # The servers are stopped by now (the launch's `with` unwound); keep what was measured.
        _keep_partial(result, run_dir, db_path, exc, hooks.log)
        raise
    result.ended_at = datetime.now(UTC)


def _measure(spec: ExperimentSpec, result: RunResult, run_dir: Path, db_path: Path, hooks: Hooks,
             sweep: SweepSpec | None) -> None:
    refs, image_errors = _images(spec, run_dir, hooks)
    facts = _checkpoint(spec, refs, hooks)
    if problems := resume_conflicts(result, {n: r.digest for n, r in refs.items()}, facts):
        raise ResumeRefused(f"cannot resume run {result.run_id}: {'; '.join(problems)}; start a new run instead")
    result.checkpoint = facts
    # Before the first launch: a variance_from that names another key's calibration stops the run here.
    priors = priors_for(db_path, spec, RunFacts(result.provenance.host, refs, facts))
    result.variance_priors = recorded(priors)  # what the looks read, kept for every later judgement of the run
    model_dir = facts.path if facts else Path(spec.served_name)
    rounds = _Rounds(spec, result, run_dir, refs, image_errors, model_dir, facts, hooks, sweep)
    names = [a.name for a in spec.arms]
    for arm_name, round_no in round_order(names, spec.design.rounds):
        rounds.run(arm_name, round_no)
    done = spec.design.rounds
    while _another_round(spec, result, done, hooks.log, priors):
        done += 1
        # the counterbalanced order for one more round per arm; the earlier rounds' launches stand
        for arm_name, round_no in round_order(names, done):
            if round_no == done:
                rounds.run(arm_name, round_no)


def _another_round(spec: ExperimentSpec, result: RunResult, done: int, log: Log, priors: Priors) -> bool:
    """The look between rounds: an adaptive design adds a round while any arm's sequential decision is
    CONTINUE (undecided with rounds left, up to max_rounds); a fixed design never does."""
    if not spec.design.adaptive:
        return False
    looks = decisions(result, spec, priors)
    for ad in looks:
        log.info("look after %d round(s), %s: %s: %s", done, ad.arm, ad.decision.outcome, ad.decision.reason)
    return any(ad.decision.outcome == "CONTINUE" for ad in looks)


def _images(spec: ExperimentSpec, run_dir: Path, hooks: Hooks) -> tuple[dict[str, ImageRef], dict[str, str]]:
    """Build every image an arm uses; a failed build fails its arms, not the run. Build logs are
    copied into the run dir, beside what the images produced."""
    refs, errors = {}, {}
    for name in dict.fromkeys(a.image for a in spec.arms):
        try:
            refs[name] = hooks.build_image(spec.image(name))
        except ImageError as exc:
            errors[name] = str(exc)
            continue
        log = refs[name].build_log
        if log is not None and log.is_file():
            (run_dir / "images").mkdir(parents=True, exist_ok=True)
            shutil.copy2(log, run_dir / "images" / f"{name}.build.log")
    return refs, errors


def _checkpoint(spec: ExperimentSpec, refs: dict[str, ImageRef], hooks: Hooks) -> CheckpointFacts | None:
    """Generate or convert (if asked) and check the checkpoint; an endpoint-only run serves its own weights.
    A packaged model comes from the images' wheelhouses when they have one (an offline host)."""
    python = model_python(refs.values())
    if python is None and spec.model.path is None:
        return None
    wheelhouses = [i.wheelhouse.expanduser() for i in spec.images if i.wheelhouse is not None]
    return hooks.prepare_checkpoint(spec.model, python, wheelhouses or None)


def _failed(arm: ArmSpec, round_no: int, reason: str) -> ArmResult:
    now = datetime.now(UTC)
    return ArmResult(name=arm.name, round=round_no, image=arm.image, k=arm.k, status="failed", reason=reason,
                     method=arm.speculative.method if arm.speculative else None, started_at=now, ended_at=now)


class _Rounds:
    """Runs one launch of one arm and records it; a k-ladder's outcome sticks for later rounds."""

    def __init__(self, spec: ExperimentSpec, result: RunResult, run_dir: Path, refs: dict[str, ImageRef],
                 image_errors: dict[str, str], model_dir: Path, facts: CheckpointFacts | None, hooks: Hooks,
                 sweep: SweepSpec | None) -> None:
        self.spec, self.result, self.run_dir = spec, result, run_dir
        self.refs, self.image_errors = refs, image_errors
        self.model_dir, self.facts = model_dir, facts
        self.hooks, self.sweep = hooks, sweep
        self.resolved: dict[str, ArmSpec] = {}
        self.scopes = nonce_scopes(spec)  # what each arm's nonces are unique to (engine/namespaces.py)
        self.done = {(a.name, a.round) for a in result.arms}  # a resumed run's finished launches
        self.redos_left = spec.design.max_redos  # per attempt: a resumed run gets the budget anew
        for a in result.arms:  # a k-ladder's outcome sticks across the resume too
            if a.status == "ok" and a.k != self.spec.arm(a.name).k:
                self.resolved[a.name] = self.spec.arm(a.name).with_k(a.k)

    def run(self, name: str, round_no: int) -> None:
        """The round's launch of arm `name`, run again while the host's other work contaminated it (the round's
        pairing and its place in the counterbalanced order stay); HostBusy when no redo is left."""
        if (name, round_no) in self.done:
            self.hooks.log.info("arm %s round %d: finished before the resume; kept, not run again", name, round_no)
            return
        while (busy := self._launch(name, round_no)) is not None:
            launch, reason = busy
            self.result.redos.append(Redo(arm=name, round=round_no, reason=reason, launch=launch))
            write_raw(self.result, self.run_dir)
            if self.redos_left == 0:
                raise HostBusy(f"host busy: {busy_line(launch.cells)} (arm {name} round {round_no}, after "
                               f"{self.spec.design.max_redos} redo(s), design.max_redos); nothing decided")
            self.redos_left -= 1
            self.hooks.log.warning("arm %s round %d: %s; the launch runs again (%d redo(s) left)", name, round_no,
                                   reason, self.redos_left)

    def _launch(self, name: str, round_no: int) -> tuple[ArmResult, str] | None:
        """One launch, recorded; or, when the host's other work contaminated a cell of it, the launch and why
        (it is not recorded among the arms: no figure of it is read)."""
        log = self.hooks.log
        arm = self.resolved.get(name) or self.spec.arm(name)
        if arm.image in self.image_errors:
            self.result.arms.append(_failed(arm, round_no, f"image {arm.image}: {self.image_errors[arm.image]}"))
            return None
        for line in orphans.sweep(stoppers()):  # servers a killed run left behind hold the machine: stop them first
            log.warning("%s", line)
        host = {h.name: h for h in self.spec.hosts}.get(arm.host)  # None: this machine
        # `-b<round>`: the suffix from when a round was called a block stays, so that a resumed run's
        # launch folders and container names follow those of its earlier launches.
        ctx = LaunchContext(model_dir=self.model_dir, served_name=self.spec.served_name,
                            arm_dir=self.run_dir / "arms" / f"{name}-b{round_no}",
                            max_model_len=self.spec.model.max_model_len, run_id=self.result.run_id,
                            launch_name=f"{self.result.run_id}-{name}-b{round_no}",
                            ranks=tuple(ranks.render(arm, {h.name: h for h in self.spec.hosts})),
                            host=host.address if host else "127.0.0.1", ssh=ranks.route_to(host),
                            netns=host.netns if host else None, max_concurrency=self.spec.workload.max_streams,
                            cpu_share=self.spec.design.cpu_share)
        log.info("arm %s round %d: launching (image %s, k=%s)", name, round_no, arm.image, arm.k)
        # In results.json while it runs: a flow killed mid-launch keeps the cells it finished.
        running = _failed(arm, round_no, UNFINISHED).model_copy(update={"in_progress": True})
        self.result.arms.append(running)

        def on_cell(cell: CellResult) -> None:
            running.cells.append(cell)
            write_raw(self.result, self.run_dir)

        outcome = self.hooks.launch(arm, self.spec, self.refs[arm.image], ctx, self.facts,
                                    namespace=launch_namespace(self.result.run_id, round_no, name, self.scopes[name]),
                                    round_no=round_no, on_cell=on_cell, sweep=self.sweep)
        self.result.arms.remove(running)
        if outcome.status == "ok" and (hit := [c for c in outcome.cells if c.contaminated]):
            return outcome, f"{len(hit)} of {len(outcome.cells)} cell(s) contaminated, first {hit[0].key.label}: " \
                            f"{hit[0].contaminated}"
        if outcome.status == "ok" and outcome.k != arm.k:
            self.resolved[name] = arm.with_k(outcome.k)
        rejected = sum(c.rejected for c in outcome.cells)
        log.info("arm %s round %d: %s, %d cell(s), %d rejected%s", name, round_no, outcome.status,
                 len(outcome.cells), rejected, f" ({outcome.reason})" if outcome.reason else "")
        self.result.arms.append(outcome)
        write_raw(self.result, self.run_dir)  # each finished launch is on disk before the next one starts
        return None


def _keep_partial(result: RunResult, run_dir: Path, db_path: Path, exc: BaseException, log: Log) -> None:
    """An interrupted run: marked so, its launch in progress says why it stopped, then written and stored."""
    result.ended_at = datetime.now(UTC)
    result.interrupted = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    for arm in result.arms:
        if arm.in_progress:
            arm.reason, arm.ended_at = f"interrupted during this launch ({result.interrupted})", result.ended_at
    write_raw(result, run_dir)
    try:
        ingest(result, db_path)  # not the ingest task: a cancelled flow runs no new tasks
    except DatabaseError as db_exc:
        log.error("partial run %s not stored (%s); load it later with `specwatch ingest %s`", result.run_id,
                  db_exc, run_dir)
        return
    log.warning("run %s interrupted (%s): %d launch(es) kept, stored as a partial run", result.run_id,
                result.interrupted, len(result.arms))
