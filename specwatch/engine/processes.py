"""What specwatch starts is always stopped: on success, error, timeout, Ctrl-C and cancellation.

Each server runs in its own process group (vLLM forks engine workers), and the whole group
is signalled. Everything live is kept in one registry, so a SIGTERM (how Prefect workers cancel
a flow run) or interpreter exit still stops it: process groups are registered by `spawn`, and
anything else with a `stop()` (a container, a remote rank) by `track`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

log = logging.getLogger("specwatch.processes")



class Stoppable(Protocol):
    def stop(self) -> object: ...


class _Group:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def stop(self) -> int | None:
        return stop(self.proc, grace_s=10.0)


_LIVE: dict[Hashable, Stoppable] = {}
_LOCK = threading.Lock()


def track(key: Hashable, thing: Stoppable) -> None:
    with _LOCK:
        _LIVE[key] = thing


def untrack(key: Hashable) -> None:
    with _LOCK:
        _LIVE.pop(key, None)


def spawn(argv: Sequence[str], env: Mapping[str, str], log_path: Path,
          tracked: bool = True) -> subprocess.Popen[bytes]:
    """Start `argv` in a process group of its own. `tracked=False`: infrastructure whose owner
    stops it (a test's container engine or sshd), which `stop_all` must not take down under it."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            list(argv), env=dict(env), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    if tracked:
        track(proc.pid, _Group(proc))
    return proc


def stop(proc: subprocess.Popen[bytes], grace_s: float = 20.0) -> int | None:
    """SIGTERM the process group, SIGKILL it after `grace_s`; returns the exit code.

    A second interrupt while waiting (Ctrl-C twice, `timeout` forwarding SIGTERM) kills the
    group at once instead of abandoning it, and a group not yet gone stays registered for
    the exit handler.
    """
    try:
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                log.warning("server pid %d ignored SIGTERM for %.0fs; killing its group", proc.pid, grace_s)
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(10)
    except BaseException:
        _signal_group(proc.pid, signal.SIGKILL)
        raise
    finally:
        # Engine workers may outlive a leader that exited on its own.
        _signal_group(proc.pid, signal.SIGKILL)
        if proc.poll() is not None:
            untrack(proc.pid)
    return proc.returncode


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on TCP `port` in this network namespace (/proc/net/tcp, tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    found.add(fields[9])
    return found


def listeners(port: int) -> set[int]:
    """The pids holding a socket that listens on TCP `port` here (every process we may read)."""
    inodes = {f"socket:[{i}]" for i in _listening_inodes(port)}
    pids = set()
    for entry in os.listdir("/proc") if inodes else []:
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if any(os.readlink(f"/proc/{entry}/fd/{fd}") in inodes for fd in os.listdir(f"/proc/{entry}/fd")):
                    pids.add(int(entry))
    return pids


def group_alive(pgid: int) -> bool:
    """Process group `pgid` still has a process (signal 0 reaches it)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def group_pids(pgid: int) -> set[int]:
    """Every live process of process group `pgid` (a server and the engine workers it forked), from /proc."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[2]) == pgid:  # field 5, pgrp
                    found.add(int(entry))
    return found


def in_group(pid: int, pgid: int) -> bool:
    try:
        return os.getpgid(pid) == pgid
    except ProcessLookupError:
        return False


def stop_all() -> None:
    with _LOCK:
        live = list(_LIVE.items())
    for key, thing in live:
        thing.stop()
        untrack(key)


def live_pids() -> list[int]:
    with _LOCK:
        return [key for key in _LIVE if isinstance(key, int)]


def _on_sigterm(signum: int, frame: object) -> None:
    # Unwind like Ctrl-C so `with` blocks stop their servers and partial results are written.
    raise KeyboardInterrupt(f"signal {signum}")


def install_signal_handlers() -> None:
    """Turn SIGTERM into KeyboardInterrupt; only possible from the main thread."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)


atexit.register(stop_all)
