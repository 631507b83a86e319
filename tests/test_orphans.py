"""The orphan rule on real processes: a server whose run's flow died is found and stopped before
the next launch; one whose run still holds its lock is left alone; a reused pid is never killed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from specwatch.engine import orphans, processes
from specwatch.engine.launchers import LaunchContext, spawn_server
from specwatch.engine.launchers.registry import stoppers
from specwatch.records import ImageRef
from specwatch.spec import ArmSpec

SERVER = [sys.executable, "-c", "import time; time.sleep(300)"]
ARM = ArmSpec(name="a", image="i")
IMAGE = ImageRef(name="i", backend="venv", package="vllm", python=Path(sys.executable))


def launch(tmp_path: Path, run_id: str) -> subprocess.Popen[bytes]:
    ctx = LaunchContext(model_dir=tmp_path, served_name="demo", arm_dir=tmp_path / run_id, run_id=run_id)
    handle = spawn_server(SERVER, ARM, IMAGE, ctx, 0, "vllm")
    member = handle.members[0]
    assert member.trace is not None  # type: ignore[attr-defined]
    proc: subprocess.Popen[bytes] = member.proc  # type: ignore[attr-defined]
    processes.untrack(proc.pid)  # as if the flow process that owned it had been killed
    return proc


def traces() -> list[dict]:
    return [json.loads(p.read_text()) for p in (orphans.state_dir() / "launches").glob("*/*.json")]


def test_an_orphan_is_stopped_and_a_live_runs_server_is_not(tmp_path: Path) -> None:
    orphan = launch(tmp_path, "dead-run")
    with orphans.run_lock("live-run"):
        alive = launch(tmp_path, "live-run")
        try:
            lines = orphans.sweep(stoppers())
            assert any("stopped orphan process group" in line and "dead-run" in line for line in lines), lines
            assert orphan.wait(10) is not None
            assert alive.poll() is None  # its run holds its lock
            assert [t["run_id"] for t in traces()] == ["live-run"]
        finally:
            processes.stop(alive)
    # the live run ended without forgetting its server (stopped behind its back): a stale record
    (line,) = orphans.sweep(stoppers())
    assert "live-run is gone or its pid was reused: record dropped" in line and traces() == []


def test_a_reused_pid_is_never_killed(tmp_path: Path) -> None:
    bystander = subprocess.Popen(SERVER, start_new_session=True)
    try:
        time.sleep(0.2)
        started, command = orphans.process_identity(bystander.pid) or ("", "")
        # a record of an earlier process that had this pid: same pid, another start time
        stale = orphans.LaunchTrace("gone-run", "process", str(bystander.pid), str(int(started) - 1), command)
        orphans.remember(stale)
        (line,) = [x for x in orphans.sweep(stoppers()) if "gone-run" in x]
        assert "pid was reused: record dropped, nothing killed" in line
        assert bystander.poll() is None
        assert not any(t["run_id"] == "gone-run" for t in traces())
    finally:
        bystander.kill()
        bystander.wait()
