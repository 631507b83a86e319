"""The GPU path on a CPU host: what a CUDA vLLM server is told and what is recorded about it.

This host has no GPU, so `nvidia-smi` is a real executable on PATH printing what the H200 host
prints, and the server is a real process (a script standing in for the image's python) whose
command line and environment are read back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from cli.app import app
from specwatch.engine import gpu
from specwatch.engine.images.registry import backend_for
from specwatch.engine.launchers import LaunchContext
from specwatch.engine.launchers.registry import launcher_for
from specwatch.host import host_facts
from specwatch.records import ImageRef, LaunchRecord
from specwatch.spec import ArmSpec, ImageSpec
from specwatch.store import db as database
from specwatch.store.ingest import ingest, load
from specwatch_testing import records as rf
from specwatch_testing.server import run_fake_vllm

# `nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv,noheader,nounits`
H200 = "0, NVIDIA H200, 143771, 1, 580.95.05\n1, NVIDIA H200, 143771, 131072, 580.95.05\n"


@pytest.fixture
def nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real `nvidia-smi` on PATH answering the two queries specwatch makes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncase \"$1\" in\n"
                   f"  --query-gpu=*) printf '{H200}' ;;\n"
                   "  --query-compute-apps=*) echo 'GPU-1, 4242, python3, 131000' ;;\nesac\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return smi


def _launch(tmp_path: Path, package: str, arm_args: list[str],
            max_concurrency: int, cpu_share: str = "cores") -> tuple[list[str], dict, LaunchRecord]:
    """Start an arm with a stand-in python that writes its argv and env, and read them back."""
    dump = tmp_path / "dump.json"
    python = tmp_path / "python"
    python.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                      f"json.dump({{'argv': sys.argv[1:], 'env': dict(os.environ)}}, open({str(dump)!r}, 'w'))\n")
    python.chmod(0o755)
    arm = ArmSpec(name="a", image="i", args=arm_args)
    image = ImageRef(name="i", backend="python", package=package, python=python)
    ctx = LaunchContext(model_dir=tmp_path, served_name="demo", arm_dir=tmp_path / "arm",
                        max_concurrency=max_concurrency, cpu_share=cpu_share)
    with launcher_for(arm, image).start(arm, image, ctx) as handle:
        handle.members[0].proc.wait(20)  # type: ignore[attr-defined]
    seen = json.loads(dump.read_text())
    return seen["argv"], seen["env"], handle.record


def test_a_gpu_server_gets_explicit_memory_and_batch_limits(tmp_path: Path) -> None:
    argv, env, record = _launch(tmp_path, "vllm", [], max_concurrency=512)
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.9"
    assert argv[argv.index("--max-num-seqs") + 1] == "512"  # never below the workload's highest concurrency
    assert (record.gpu_memory_utilization, record.max_num_seqs) == (0.9, 512)
    assert "VLLM_CPU_KVCACHE_SPACE" not in env and env["NCCL_NVLS_ENABLE"] == "0"
    # a GPU server does not share the client's cores: no priority, no binding, the client anywhere
    assert record.argv[0] != "nice" and "VLLM_CPU_OMP_THREADS_BIND" not in env and record.client_cores is None


def test_the_arms_own_limits_win_and_are_recorded(tmp_path: Path) -> None:
    argv, _, record = _launch(tmp_path, "vllm", ["--max-num-seqs=64", "--gpu-memory-utilization", "0.5"], 16)
    assert argv.count("--max-num-seqs=64") == 1 and "--max-num-seqs" not in argv
    assert argv.count("--gpu-memory-utilization") == 1
    assert (record.gpu_memory_utilization, record.max_num_seqs) == (0.5, 64)
    _, _, small = _launch(tmp_path, "vllm", [], max_concurrency=4)
    assert small.max_num_seqs == 256  # the floor: vLLM's own default moves with the card's memory


def test_a_cpu_server_keeps_its_platform_defaults(tmp_path: Path) -> None:
    argv, env, record = _launch(tmp_path, "vllm-cpu", [], max_concurrency=512)
    assert "--gpu-memory-utilization" not in argv and "--max-num-seqs" not in argv
    assert (record.gpu_memory_utilization, record.max_num_seqs) == (None, None)
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and record.argv[0] != "nice"
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) > 1:  # cpu_share cores: the engine's threads on all but the first, the client on the first
        assert env["VLLM_CPU_OMP_THREADS_BIND"] == ",".join(map(str, cores[1:])) and record.client_cores == cores[:1]
    _, niced, by_nice = _launch(tmp_path, "vllm-cpu", [], max_concurrency=1, cpu_share="nice")
    assert by_nice.argv[:3] == ["nice", "-n", "10"] and by_nice.client_cores is None
    assert "VLLM_CPU_OMP_THREADS_BIND" not in niced


def test_host_facts_and_the_precheck_read_nvidia_smi(nvidia_smi: Path) -> None:
    facts = host_facts()
    assert (facts.gpu_model, facts.gpu_count, facts.gpu_driver, facts.gpu_memory_mib) == (
        "NVIDIA H200", 2, "580.95.05", 143771.0)
    held = gpu.precheck(["--gpu-memory-utilization", "0.9"])
    assert held is not None and held.startswith("GPU 1 (NVIDIA H200) has 12699 of 143771 MiB free")
    assert "4242" in held and "GPU 0" not in held
    assert gpu.precheck(["--gpu-memory-utilization", "0.05"]) is None


def test_gpu_facts_and_limits_are_stored_and_read_back(tmp_path: Path) -> None:
    result = rf.run()
    result.provenance.host = result.provenance.host.model_copy(update={
        "gpu_model": "NVIDIA H200", "gpu_count": 1, "gpu_driver": "580.95.05", "gpu_memory_mib": 143771.0})
    for arm in result.arms:
        assert arm.launch is not None
        argv = ["--gpu-memory-utilization", "0.85", "--max-num-seqs", "300"]
        arm.launch = arm.launch.model_copy(update={"argv": argv})
    path = tmp_path / "h.duckdb"
    ingest(result, path)
    assert rf.query(path, "select gpu_model, gpu_memory_mib from runs") == [("NVIDIA H200", 143771.0)]
    assert rf.query(path, "select distinct gpu_memory_utilization, max_num_seqs from arms") == [(0.85, 300)]
    con = database.connect(path, read_only=True)
    back = load(con, result.run_id)
    con.close()
    assert back.provenance.host.gpu_memory_mib == 143771.0
    assert {(a.launch.gpu_memory_utilization, a.launch.max_num_seqs) for a in back.arms if a.launch} == {(0.85, 300)}


def test_the_python_backend_takes_a_home_relative_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home / "venv")], check=True)
    monkeypatch.setenv("HOME", str(home))
    ref = backend_for(spec := ImageSpec(name="gpu", backend="python", python="~/venv/bin/python")).ensure(spec)
    assert ref.python == home / "venv" / "bin" / "python"


FAKE = ["--served-model-name", "demo", "--spec-config", '{"method":"ngram","num_speculative_tokens":3}',
        "--step-ms", "2"]


def _bench(url: str, concurrency: str, max_tokens: int, requests: int, *extra: str) -> None:
    res = CliRunner().invoke(app, ["bench", "--endpoint", url, "--model", "demo", "--concurrency", concurrency,
                                   "--prompt-class", "code", "--prompt-tokens", "48", "--max-tokens", str(max_tokens),
                                   "--requests", str(requests), "--warmup", "1", *extra])
    assert res.exit_code == 0, res.output


def test_bench_writes_each_cells_prompts_as_the_peers_dataset(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    with run_fake_vllm(FAKE) as url:
        _bench(url, "1,2", 12, 5, "--dataset-out", str(out))
    files = sorted(p.name for p in out.iterdir())
    assert files == ["closed_c1_code_p48.jsonl", "closed_c2_code_p48.jsonl"]
    rows = [json.loads(line) for line in (out / files[0]).read_text().splitlines()]
    assert len(rows) == 5 and {r["output_tokens"] for r in rows} == {12}
    prompts = [r["prompt"] for r in rows]
    assert len(set(prompts)) == 5  # a nonce at the front of each: the peer's replay never hits a shared prefix
    assert len({p[:40] for p in prompts}) == 5 and all(p.startswith("unique request ") for p in prompts)
    other = [json.loads(line)["prompt"] for line in (out / files[1]).read_text().splitlines()]
    assert not set(other) & set(prompts)  # each cell has its own nonces


def test_each_closed_cell_is_preceded_by_a_discarded_wave_at_its_concurrency(tmp_path: Path) -> None:
    """The wave runs the cell's batch shape once before the window (what a GPU compiles per shape)."""
    out = tmp_path / "b.json"
    with run_fake_vllm(FAKE) as url:
        _bench(url, "3", 24, 6, "--json", str(out))
        records = httpx.get(f"{url}/truth").json()["records"]
    wave = [r for r in records if r["max_tokens"] == 16]
    measured = [r for r in records if r["max_tokens"] == 24]
    assert len(wave) == 3 and len(measured) == 1 + 6  # the launch's one warm-up request, then the cell's six
    assert max(r["t_arrival"] for r in wave) < min(r["t_arrival"] for r in measured[1:])
    assert max(r["t_arrival"] for r in wave) - min(r["t_arrival"] for r in wave) < 0.5  # side by side
    cell = json.loads(out.read_text())["cells"][0]
    assert cell["generation_tokens"] == 6 * 24  # the wave is outside the cell's counter window


def _venv_with_dist(root: Path, dist: str, version: str) -> Path:
    """A real venv whose metadata says `dist==version` is installed (no code: the plan only probes)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    info = Path(purelib) / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    return python


def test_the_plan_of_a_python_image_uses_the_vllm_build_its_environment_has(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`validate --plan` on the GPU host shows the GPU launch and a GPU wall time; elsewhere it says it cannot know."""
    # A cache of its own: the session's holds the packaged model once the real-server tests' background
    # process has read it, and the plan would then convert it with these venvs, which have no transformers.
    monkeypatch.setenv("SPECWATCH_CACHE", str(tmp_path / "cache"))
    gpu_py, cpu_py = _venv_with_dist(tmp_path / "gpu", "vllm", "0.26.0"), _venv_with_dist(tmp_path / "cpu",
                                                                                             "vllm-cpu", "0.32.0")
    text = Path("examples/gpu-ngram.yaml").read_text()
    minutes = {}
    for name, python in (("gpu", gpu_py), ("cpu", cpu_py), ("absent", tmp_path / "none" / "python")):
        exp = tmp_path / f"{name}.yaml"
        exp.write_text(text.replace("~/vllm-venv/bin/python", str(python)))
        result = CliRunner().invoke(app, ["validate", "--plan", str(exp)], terminal_width=400)
        assert result.exit_code == 0, result.output
        platform = {"gpu": "gpu", "cpu": "cpu", "absent": "unknown"}[name]
        assert f"│ {platform} " in result.output
        assert ("an unknown platform is estimated as cpu" in result.output) == (name == "absent")
        # --plan prints each arm's one server launch, with the flags this platform adds
        assert result.output.count("rank 0 (server) on local") == 2
        assert ("--gpu-memory-utilization 0.9 --max-num-seqs 256" in result.output) == (name == "gpu")
        minutes[name] = float(result.output.split("rough wall time ")[1].split()[0])
    assert minutes["gpu"] < minutes["cpu"] / 3
    assert minutes["absent"] == minutes["cpu"]
