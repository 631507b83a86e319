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
from specwatch_testing.experiments import LOADED_HOST, command_ab, fake_checkpoint

LOG = logging.getLogger("test_decisive")
DESIGN = {"rounds": 3, "max_rounds": 6, "adaptive": True, "probes": 0}


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
    doc["thresholds"] = LOADED_HOST  # a loaded CI host must not reject cells: the noise is what is planted
    return resolve(ExperimentSpec.model_validate(doc))


def launch(arm: ArmSpec, spec: ExperimentSpec, image: ImageRef, ctx: LaunchContext, facts: CheckpointFacts | None,
           namespace: str, round_no: int = 1, on_cell: object = None, sweep: SweepSpec | None = None) -> ArmResult:
    return run_arm(arm, spec, image, ctx, facts, namespace, round_no, runner=InProcess())


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


def test_a_batched_cell_sends_whole_waves_and_every_launch_completes_the_same_requests(tmp_path: Path) -> None:
    # c=16 with the default 16 whole waves: 256 requests from a file that asks for 16. The candidate's
    # steps are half as long, every boot draws its own speed (sd 5%) and each step slows with the batch,
    # so the arms' speeds differ and vary: the requests each completes must not. Steps of 10 ms, not 3: on a
    # loaded host a 16-stream step of 3 ms was set by the CPU, not the planted sleep, and a 20% gain read
    # -13% and +40% in its two rounds.
    spec = planted(tmp_path, ["--launch-sd", "0.05", "--step-ms", "10", "--step-ms-per-seq", "0.05"],
                   ["--launch-sd", "0.05", "--step-ms", "10", "--step-ms-per-seq", "0.05", "--slowdown", "0.5"])
    spec = resolve(spec.model_copy(update={
        "workload": spec.workload.model_copy(update={"concurrency": [16], "requests_per_cell": 16, "max_tokens": 24}),
        "design": spec.design.model_copy(update={"rounds": 2, "max_rounds": None, "adaptive": False}),
        # a loaded 2-core host leaves slots empty between short requests: the gate is not under test here
        "thresholds": spec.thresholds.model_copy(update={"min_running_share": 0.5})}))
    assert spec.workload.cell_requests(16) == 256
    result, a = run(spec, tmp_path)
    assert len(result.arms) == 4 and all(launch.status == "ok" for launch in result.arms)
    done = [{r.request_id for c in launch.cells for r in c.requests if r.status == "ok"} for launch in result.arms]
    # every request by both arms, and round 2 sent what round 1 did: fresh servers share the run's nonces
    assert len(done[0]) == 256 and all(d == done[0] for d in done)
    (arm,) = a.arms
    (series,) = arm.comparison.series
    # judged on aggregate throughput (metrics.BATCHED_CONCURRENCY), not from paired requests
    assert arm.comparison.paired == 0 and arm.comparison.valued == 2
    assert all(v > 0 for v in series.values), series.values  # the candidate's planted gain, seen each round
