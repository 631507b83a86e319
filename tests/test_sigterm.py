"""Long-running servers stop on SIGTERM, the way a service manager or a container engine stops them: the
CLI process and everything it started (the Prefect server, the worker and what they fork) are gone, and
its port is free. Each server runs as a user runs it, a `specwatch` subprocess."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from specwatch.engine import processes
from specwatch.engine.launchers import free_port
from specwatch_testing.cli import SPECWATCH
from specwatch_testing.server import child_pids


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` in the process tree (children in sessions of their own included)."""
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        children = [c for p in frontier for c in child_pids(p) if c not in found]
        found.update(children)
        frontier = children
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def start(args: list[str], home: Path, ready: str, timeout_s: float) -> subprocess.Popen[str]:
    """`specwatch ARGS` in a session of its own; returns once its output has the line `ready`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update({"SPECWATCH_HOME": str(home), "PYTHONUNBUFFERED": "1", "COLUMNS": "200"})
    proc = subprocess.Popen([str(SPECWATCH), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    seen = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if ready in line:
            return proc
        if time.monotonic() > deadline:
            break
    stop_tree(proc, descendants(proc.pid))
    pytest.fail(f"`specwatch {' '.join(args)}` never printed {ready!r}:\n{''.join(seen)[-2000:]}")


def stop_tree(proc: subprocess.Popen[str], tree: set[int]) -> None:
    """Cleanup after a failed check: what the test started must not outlive it either."""
    for pid in {proc.pid, *tree}:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(10)


def sigterm_leaves_nothing(proc: subprocess.Popen[str], port: int, expect_children: bool) -> None:
    tree = descendants(proc.pid)
    assert bool(tree) == expect_children, f"processes started: {sorted(tree)}"
    assert processes.listeners(port), f"nothing listens on {port} before SIGTERM"
    try:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = sorted(pid for pid in tree if alive(pid))
        assert not left, f"left running after SIGTERM: {left}"
        assert not processes.listeners(port), f"port {port} still listened on after SIGTERM"
        assert code in (0, 130), code
    finally:
        stop_tree(proc, tree)


def test_sigterm_stops_specwatch_serve_and_the_prefect_server_and_worker_it_started(tmp_path: Path) -> None:
    port = free_port()
    proc = start(["serve", "--port", str(port)], tmp_path, "SIGTERM stops everything", timeout_s=240)
    sigterm_leaves_nothing(proc, port, expect_children=True)
