"""`specwatch` as a user runs it: a subprocess with its own SPECWATCH_HOME (and Prefect home under it)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from specwatch_testing.server import child_pids

SPECWATCH = Path(sys.executable).parent / "specwatch"


def specwatch(*args: str, home: Path, env: dict[str, str] | None = None,
              timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the CLI; its Prefect state (ephemeral API database, logs, artifacts) lands in home/prefect."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    full.update({"SPECWATCH_HOME": str(home), "PREFECT_HOME": str(home / "prefect"), **(env or {})})
    return subprocess.run([str(SPECWATCH), *args], capture_output=True, text=True, timeout=timeout, env=full)


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
    """Running, not a zombie its parent has yet to reap."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def start_specwatch(args: list[str], home: Path, ready: str, timeout_s: float) -> subprocess.Popen[str]:
    """`specwatch ARGS` as a long-running server, in a session of its own; returns once its output has the line
    `ready` (the caller stops it); RuntimeError with the output if it never does."""
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
    raise RuntimeError(f"`specwatch {' '.join(args)}` never printed {ready!r}:\n{''.join(seen)[-2000:]}")


def stop_tree(proc: subprocess.Popen[str], tree: set[int]) -> None:
    """Kill what a test started (the CLI and `tree`, its processes), whatever state a failed check left."""
    for pid in {proc.pid, *tree}:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(10)
