"""The experiment runner (specwatch/engine/experiment.py) with fake stages: no Prefect, no server.

What the flows rely on: the counterbalanced launch order, a resume that runs only what is missing, a
partial run kept on an interrupt, the looks adding rounds while undecided, and a failure's record on disk.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from specwatch.analysis.rounds import round_order
from specwatch.bench.runner import CellCallback
from specwatch.engine.checkpoint import CheckpointError, PythonRunner
from specwatch.engine.experiment import UNFINISHED, Hooks, ResumeRefused, new_result, resumed, run_experiment
from specwatch.engine.images import ImageError
from specwatch.engine.launchers import LaunchContext
from specwatch.records import ArmResult, CheckpointFacts, ImageRef, RunResult
from specwatch.spec import ArmSpec, ExperimentSpec, ImageSpec, ModelSpec, SweepSpec
from specwatch.store.rundir import read_raw
from specwatch_testing import records as rf
from specwatch_testing.experiments import command_ab, fake_checkpoint
from specwatch_testing.records import query as q

LOG = logging.getLogger("test_experiment")
DIGEST = "sha256:" + "a" * 64


def make_spec(tmp: Path, design: dict[str, object]) -> ExperimentSpec:
    doc = command_ab("runner", str(fake_checkpoint(tmp / "ckpt")), sys.executable)
    doc["design"] = {"probes": 0, **design}
    return ExperimentSpec.model_validate(doc)


@dataclass
class FakeLaunch:
    """A launch that measures one cell at once: `decode_s[arm](round)` seconds of decode per request."""

    decode_s: dict[str, float | list[float]] = field(default_factory=dict)
    interrupt_at: tuple[str, int] | None = None  # this launch finishes one cell, then Ctrl-C
    calls: list[tuple[str, int]] = field(default_factory=list)
    namespaces: dict[tuple[str, int], str] = field(default_factory=dict)  # (arm, round) -> its nonce namespace
    locked: list[bool] = field(default_factory=list)  # whether the cluster lock was held at each launch
    lock_held: bool = False

    def __call__(self, arm: ArmSpec, spec: ExperimentSpec, image: ImageRef, ctx: LaunchContext,
                 facts: CheckpointFacts | None, namespace: str, round_no: int = 1, on_cell: CellCallback | None = None,
                 sweep: SweepSpec | None = None) -> ArmResult:
        self.calls.append((arm.name, round_no))
        self.namespaces[(arm.name, round_no)] = namespace
        self.locked.append(self.lock_held)
        per_round = self.decode_s.get(arm.name, 1.0)
        decode_s = per_round[(round_no - 1) % len(per_round)] if isinstance(per_round, list) else per_round
        cell = rf.cell(1, "code", decode_s, [80.0, 60.0, 40.0][:arm.k or 0])
        if on_cell is not None:
            on_cell(cell)
        if self.interrupt_at == (arm.name, round_no):
            raise KeyboardInterrupt
        now = datetime.now(UTC)
        return ArmResult(name=arm.name, round=round_no, image=arm.image, k=arm.k, method="ngram", status="ok",
                         image_ref=image, started_at=now, ended_at=now, cells=[cell])

    @contextmanager
    def lock(self) -> Iterator[None]:
        self.lock_held = True
        try:
            yield
        finally:
            self.lock_held = False


def build(spec: ImageSpec) -> ImageRef:
    return ImageRef(name=spec.name, backend="python", python=Path(sys.executable), digest=DIGEST)


def hooks(launch: FakeLaunch, tmp: Path) -> Hooks:
    def checkpoint(model: ModelSpec, python: PythonRunner | None, find_links: list[Path] | None) -> CheckpointFacts:
        return CheckpointFacts(path=tmp / "ckpt", config_sha256="c" * 64)

    return Hooks(build_image=build, prepare_checkpoint=checkpoint, launch=launch, log=LOG, cluster_lock=launch.lock)


def run(spec: ExperimentSpec, tmp: Path, launch: FakeLaunch, result: RunResult | None = None,
        **changes: object) -> RunResult:
    result = result or new_result(spec, "20261202T000000Z-runner", None)
    run_experiment(spec, result, tmp / "run", tmp / "h.duckdb", replace(hooks(launch, tmp), **changes))
    return result


def test_launches_run_in_the_counterbalanced_order_under_the_cluster_lock(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, {"rounds": 2})
    launch = FakeLaunch()
    result = run(spec, tmp_path, launch)
    assert launch.calls == round_order(["k2", "k3"], 2)
    assert all(launch.locked)
    assert [(a.name, a.round, a.status) for a in result.arms] == [(n, b, "ok") for n, b in launch.calls]
    assert result.checkpoint is not None and result.ended_at is not None
    assert read_raw(tmp_path / "run").arms == result.arms  # each launch on disk as it finishes
    # common random numbers: every launch sends the run's prompts, each to a fresh server
    assert launch.namespaces == {(arm, b): result.run_id for arm, b in launch.calls}


def test_resume_runs_only_the_launches_not_finished(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    spec = make_spec(tmp_path, {"rounds": 2})
    order = round_order(["k2", "k3"], 2)
    first = FakeLaunch(interrupt_at=order[2])
    with pytest.raises(KeyboardInterrupt):
        run(spec, tmp_path, first)

    caplog.set_level(logging.INFO, LOG.name)
    again = resumed(tmp_path / "run", LOG)
    assert "unfinished when the run stopped; its 1 cell(s) are dropped" in caplog.text
    assert again.interrupted is None and not any(a.in_progress for a in again.arms)
    second = FakeLaunch()
    result = run(spec, tmp_path, second, again)
    assert second.calls == order[2:]  # the interrupted launch again, whole, then the rest
    assert sorted((a.name, a.round) for a in result.arms) == sorted(order)
    assert caplog.text.count("finished before the resume; kept, not run again") == 2


def test_an_interrupt_keeps_the_partial_run_on_disk_and_in_the_database(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, {"rounds": 1})
    launch = FakeLaunch(interrupt_at=("k3", 1))
    result = new_result(spec, "20261202T000000Z-partial", None)
    with pytest.raises(KeyboardInterrupt):
        run(spec, tmp_path, launch, result)
    kept = read_raw(tmp_path / "run")
    assert kept.interrupted == "KeyboardInterrupt" and kept.ended_at is not None
    (done, stopped) = kept.arms
    assert done.status == "ok" and stopped.in_progress and len(stopped.cells) == 1
    assert stopped.reason == "interrupted during this launch (KeyboardInterrupt)" != UNFINISHED
    assert q(tmp_path / "h.duckdb", "select partial, interrupted from runs") == [(True, "KeyboardInterrupt")]


def test_the_adaptive_looks_add_rounds_while_the_sequential_decision_is_undecided(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOG.name)
    spec = make_spec(tmp_path, {"rounds": 3, "max_rounds": 5, "adaptive": True})
    noisy = FakeLaunch(decode_s={"k3": [0.7, 1.4, 0.8, 1.3, 0.75]})
    run(spec, tmp_path / "noisy", noisy)
    # rounds 4 and 5 added one look at a time, each in the counterbalanced order of the longer design
    assert noisy.calls == round_order(["k2", "k3"], 5)
    assert "look after 3 round(s), k3: CONTINUE: decode_tok_s composite" in caplog.text
    assert "look after 4 round(s), k3: CONTINUE" in caplog.text
    assert "look after 5 round(s), k3: INCONCLUSIVE: maximum of 5 rounds reached" in caplog.text

    clear = FakeLaunch(decode_s={"k3": [0.50, 0.51, 0.49]})
    run(spec, tmp_path / "clear", clear)
    assert len(clear.calls) == 6  # decided at the minimum: no round added
    assert "look after 3 round(s), k3: PROMOTE" in caplog.text

    # without `adaptive`, max_rounds adds nothing: exactly `rounds` rounds
    fixed = FakeLaunch(decode_s={"k3": [0.7, 1.4, 0.8, 1.3, 0.75]})
    run(make_spec(tmp_path, {"rounds": 3, "max_rounds": 5}), tmp_path / "fixed", fixed)
    assert len(fixed.calls) == 6


def test_a_failed_image_build_fails_its_arms_not_the_run(tmp_path: Path) -> None:
    def broken(spec: ImageSpec) -> ImageRef:
        raise ImageError("no such python")

    spec = make_spec(tmp_path, {"rounds": 1})
    launch = FakeLaunch()
    result = run(spec, tmp_path, launch, build_image=broken)
    assert launch.calls == []
    assert [(a.name, a.status, a.reason) for a in result.arms] == [(n, "failed", "image here: no such python")
                                                                  for n in ("k2", "k3")]


def test_a_checkpoint_error_is_raised_with_the_record_written(tmp_path: Path) -> None:
    def bad(model: ModelSpec, python: PythonRunner | None, find_links: list[Path] | None) -> CheckpointFacts:
        raise CheckpointError("no config.json")

    spec = make_spec(tmp_path, {"rounds": 1})
    with pytest.raises(CheckpointError):
        run(spec, tmp_path, FakeLaunch(), prepare_checkpoint=bad)
    assert read_raw(tmp_path / "run").ended_at is not None


def test_resume_is_refused_when_an_image_changed(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, {"rounds": 2})
    earlier = new_result(spec, "20261202T000000Z-changed", None)
    ref = ImageRef(name="here", backend="python", python=Path(sys.executable), digest="sha256:" + "b" * 64)
    earlier.arms = [rf.arm("k2", 2, 1.0, [80.0, 60.0]).model_copy(update={"image": "here", "image_ref": ref})]
    launch = FakeLaunch()
    with pytest.raises(ResumeRefused, match="image here changed"):
        run(spec, tmp_path, launch, earlier)
    assert launch.calls == [] and not (tmp_path / "run" / "results.json").exists()
