"""The real CLI interrupted mid-cell (Ctrl-C, and SIGKILL of the flow process), then `specwatch run --resume`:
what the user sees, which processes are gone, and what reaches the DuckDB file."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from specwatch import paths
from specwatch.engine import orphans, processes
from specwatch_testing.experiments import LOADED_HOST
from specwatch_testing.records import query as q
from specwatch_testing.server import REPO, child_pids

FAKE = ("{python} -m specwatch_testing.fake_vllm --port {port} --served-model-name {served_name} "
        "--spec-config {spec_config} --step-ms 25 --log-interval-s 0")
NGRAM = {"method": "ngram", "k": 3, "prompt_lookup_max": 4}
CELLS = 2  # per launch
REQUESTS = 3  # per cell


def write_experiment(tmp: Path) -> Path:
    ckpt = tmp / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    doc = {"name": "resume", "model": {"path": str(ckpt), "served_name": "demo"},
           "images": [{"name": "py", "backend": "python", "python": sys.executable}],
           "arms": [{"name": name, "image": "py", "launcher": "command", "command": FAKE, "speculative": NGRAM}
                    for name in ("base", "cand")],
           "baseline": "base", "design": {"rounds": 1, "probes": 0},
           "thresholds": LOADED_HOST,
           "workload": {"prompt_classes": ["code", "json"], "prompt_tokens": 24, "max_tokens": 48,
                        "concurrency": [1], "requests_per_cell": REQUESTS, "warmup_requests": 1}}
    path = tmp / "exp.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def cli(*args: str) -> subprocess.Popen[str]:
    """The CLI in a session of its own, so that no signal meant for pytest reaches it."""
    return subprocess.Popen([sys.executable, "-m", "cli", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def wait_for_a_written_cell(proc: subprocess.Popen[str], timeout_s: float = 120.0) -> tuple[str, int]:
    """The run id and server pid once the first launch has one finished cell in results.json."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        for results in paths.runs_dir().glob("*/results.json"):
            try:
                doc = json.loads(results.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            running = [a for a in doc["arms"] if a["in_progress"] and a["cells"]]
            traces = list((orphans.state_dir() / "launches" / doc["run_id"]).glob("*.json"))
            if running and traces:
                return doc["run_id"], int(json.loads(traces[0].read_text())["ident"])
        time.sleep(0.1)
    raise AssertionError("no cell was ever written to results.json")


@pytest.fixture
def kill_on_failure() -> Iterator[list[int]]:
    groups: list[int] = []
    yield groups
    for pgid in groups:  # what a failed test left behind, by the ids it started
        if processes.group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)


def test_ctrl_c_stores_a_partial_run_and_resume_completes_it(tmp_path: Path, kill_on_failure: list[int]) -> None:
    db = tmp_path / "h.duckdb"
    proc = cli("run", str(write_experiment(tmp_path)), "--db", str(db))
    run_id, server = wait_for_a_written_cell(proc)
    kill_on_failure.append(server)
    # To the CLI only: a terminal's Ctrl-C also reaches the ephemeral Prefect API, and Prefect's engine then
    # retries its crash report to that dead API for over 25 s before the CLI exits (docs/reliability.md)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "interrupted; servers stopped, partial run stored" in out and "Traceback" not in out
    assert not processes.group_alive(server)
    assert q(db, "select partial, interrupted from runs") == [(True, "KeyboardInterrupt")]
    (status, reason, cells), = q(db, "select status, reason, (select count(*) from cells c where c.arm = a.arm) "
                                     "from arms a")
    assert status == "failed" and reason.startswith("interrupted during this launch") and cells >= 1

    resumed = cli("run", "--resume", run_id, "--db", str(db))
    out, _ = resumed.communicate(timeout=180)
    assert resumed.returncode in (0, 3, 4), out
    assert "unfinished when the run stopped" in out
    assert q(db, "select partial, interrupted from runs") == [(False, None)]
    assert q(db, "select arm, round, status from arms order by arm") == [("base", 1, "ok"), ("cand", 1, "ok")]
    assert q(db, "select count(*), count(distinct cell) from cells") == [(2 * CELLS, CELLS)]
    assert q(db, "select count(*) from requests where status = 'ok'") == [(2 * CELLS * REQUESTS,)]


def test_sigkilled_flow_leaves_an_orphan_that_resume_stops(tmp_path: Path, kill_on_failure: list[int]) -> None:
    db = tmp_path / "h.duckdb"
    log = (tmp_path / "killed.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "cli", "run", str(write_experiment(tmp_path)), "--db", str(db)],
                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True)
    run_id, server = wait_for_a_written_cell(proc)
    kill_on_failure.append(server)
    # the ephemeral Prefect API the killed CLI started outlives it: this test stops it (by pid) itself
    prefect_api = [pid for pid in child_pids(proc.pid) if pid != server and b"prefect" in
                   Path(f"/proc/{pid}/cmdline").read_bytes()]
    proc.kill()
    proc.wait(30)
    for pid in prefect_api:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    time.sleep(0.5)
    assert processes.group_alive(server), "the orphan this test is about"
    doc = json.loads((paths.runs_dir() / run_id / "results.json").read_text())
    assert [a["cells"] != [] for a in doc["arms"]] == [True]  # the killed launch's finished cells are on disk

    resumed = cli("run", "--resume", run_id, "--db", str(db))
    out, _ = resumed.communicate(timeout=180)
    assert resumed.returncode in (0, 3, 4), out
    assert f"stopped orphan process group {server} of run {run_id}" in out
    assert not processes.group_alive(server)
    assert q(db, "select arm, status from arms order by arm") == [("base", "ok"), ("cand", "ok")]
    assert q(db, "select count(*) from requests where status = 'ok'") == [(2 * CELLS * REQUESTS,)]


def test_resume_refuses_when_the_checkpoint_changed(tmp_path: Path) -> None:
    from specwatch.records import CheckpointFacts, HostFacts, Provenance, RunResult
    from specwatch.spec import ExperimentSpec
    from specwatch.store.rundir import write_raw
    from specwatch_testing.records import T0

    exp = write_experiment(tmp_path)
    spec = ExperimentSpec.model_validate(yaml.safe_load(exp.read_text()))
    ckpt = tmp_path / "ckpt"
    run_id = "20261201T000000Z-refuse"
    write_raw(RunResult(run_id=run_id, experiment_name="resume", experiment=spec.model_dump(mode="json"),
                        provenance=Provenance(specwatch_version="0", host=HostFacts(hostname="h", platform="p",
                                                                                     python="3")),
                        checkpoint=CheckpointFacts(path=ckpt, config_sha256="0" * 64),
                        started_at=T0), paths.runs_dir() / run_id)
    proc = cli("run", "--resume", run_id, "--db", str(tmp_path / "h.duckdb"))
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert f"cannot resume run {run_id}: the checkpoint changed: config_sha256 000000000000 then" in out
    assert not (tmp_path / "h.duckdb").exists() or q(tmp_path / "h.duckdb", "select count(*) from runs") == [(0,)]


def test_resume_conflicts_name_a_changed_image_digest() -> None:
    from specwatch.records import ImageRef
    from specwatch.store.rundir import resume_conflicts
    from specwatch_testing.records import run

    ref = ImageRef(name="old", backend="venv", digest="sha256:" + "a" * 64)
    previous = run()
    previous.arms = [a.model_copy(update={"image_ref": ref}) for a in previous.arms]
    arm = previous.arms[0]
    assert resume_conflicts(previous, {arm.image: "sha256:" + "a" * 64}, None) == []
    (problem,) = resume_conflicts(previous, {arm.image: "sha256:" + "b" * 64}, None)
    assert problem == (f"image {arm.image} changed since the run's earlier launches "
                       "(digest sha256:aaaaaaaaaaaa then, sha256:bbbbbbbbbbbb now)")
