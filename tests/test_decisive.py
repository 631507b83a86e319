"""The sequential verdict end to end on fake servers with planted effects and planted launch noise: the
runner boots fake_vllm once per arm and round (command launcher), each boot drawing its own slowdown
(`--launch-sd`), and stops adding rounds once the decision is made. No Prefect."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from specwatch.analysis.verdict import Assessment, assess
from specwatch.bench.runner import InProcess
from specwatch.engine.arm import run_arm
from specwatch.engine.checkpoint import PythonRunner
from specwatch.engine.experiment import Hooks, new_result, run_experiment
from specwatch.engine.images.registry import backend_for
from specwatch.engine.launchers import LaunchContext
from specwatch.records import ArmResult, CheckpointFacts, ImageRef, RunResult
from specwatch.resolve import resolve
from specwatch.spec import ArmSpec, ExperimentSpec, ModelSpec, SweepSpec
from specwatch_testing.experiments import LOOSE_CLIENT_GATES, command_ab, fake_checkpoint

LOG = logging.getLogger("test_decisive")
DESIGN = {"blocks": 3, "max_blocks": 6, "adaptive": True, "probes": 0}


def planted(tmp: Path, base_args: list[str], cand_args: list[str]) -> ExperimentSpec:
    """k=3 against k=3 whose servers differ only in the planted arguments. Acceptance is near 1, so a
    request's speed is its step time: without common random numbers the arms' prompts differ, and a
    fake server's acceptance is drawn per prompt, which would add noise that is not planted."""
    doc = command_ab("planted", str(fake_checkpoint(tmp / "ckpt")), sys.executable)
    steady = ["--accept-probs", "0.99,0.98,0.97", "--step-ms", "8"]  # later flags win over FAKE_SERVE's
    doc["arms"][0]["args"], doc["arms"][1]["args"] = steady + base_args, steady + cand_args
    doc["arms"][0]["speculative"] = doc["arms"][1]["speculative"]
    doc["design"] = {**DESIGN, "varies": ["args"]}
    doc["workload"] = {**doc["workload"], "max_tokens": 48, "requests_per_cell": 6}
    doc["thresholds"] = LOOSE_CLIENT_GATES  # a loaded CI host must not reject cells: the noise is what is planted
    return resolve(ExperimentSpec.model_validate(doc))


def launch(arm: ArmSpec, spec: ExperimentSpec, image: ImageRef, ctx: LaunchContext, facts: CheckpointFacts | None,
           namespace: str, block: int = 1, on_cell: object = None, sweep: SweepSpec | None = None) -> ArmResult:
    return run_arm(arm, spec, image, ctx, facts, namespace, block, runner=InProcess())


def run(spec: ExperimentSpec, tmp: Path) -> tuple[RunResult, Assessment]:
    def checkpoint(model: ModelSpec, python: PythonRunner | None, links: list[Path] | None) -> CheckpointFacts:
        return CheckpointFacts(path=tmp / "ckpt", config_sha256="c" * 64)

    hooks = Hooks(build_image=lambda image: backend_for(image).ensure(image), prepare_checkpoint=checkpoint,
                  launch=launch, log=LOG)
    result = new_result(spec, "20261202T000000Z-planted", None)
    run_experiment(spec, result, tmp / "run", tmp / "h.duckdb", hooks)
    return result, assess(result, spec)


def test_a_planted_large_gain_promotes_and_stops_at_the_minimum(tmp_path: Path) -> None:
    # the candidate's steps take half as long; each boot's speed varies by 2% (sd of the log)
    spec = planted(tmp_path, ["--launch-sd", "0.02"], ["--launch-sd", "0.02", "--slowdown", "0.5"])
    result, a = run(spec, tmp_path)
    assert a.verdict.decision == "PROMOTE", a.verdict.all_reasons
    (arm,) = a.arms
    assert arm.decision.rounds == 3 and len(result.arms) == 6  # decided at the first look: rounds 4-6 not run
    assert arm.decision.composite.interval is not None and arm.decision.composite.interval.low > 0.5
    # requests paired by index; a round where the loaded host made one stream arrive in a burst (no rate
    # in one arm) falls back to the cell figures
    assert arm.comparison.valued == 3 and arm.comparison.paired >= 1


def test_a_planted_zero_with_low_noise_is_no_change(tmp_path: Path) -> None:
    spec = planted(tmp_path, ["--launch-sd", "0.005"], ["--launch-sd", "0.005", "--log-interval-s", "11"])
    result, a = run(spec, tmp_path)
    assert a.verdict.decision == "NO CHANGE", a.verdict.all_reasons
    (arm,) = a.arms
    interval = arm.decision.composite.interval
    assert interval is not None and -0.05 < interval.low < interval.high < 0.05
    # the host's own timing noise (a loaded CI host) can take it past the first look, never past a decision
    assert len(result.arms) == 2 * arm.decision.rounds
