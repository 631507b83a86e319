"""Orphans: servers a run started and did not stop, because its flow process was killed.

Every launched server process or container is recorded in the state dir while it lives, and a
running flow holds its run's lock. An orphan is a recorded process or container whose run holds
no live lock. Pids get reused, so before stopping one its identity is checked against the
record (a process's start time; a container's id and run label); a record that
no longer matches is dropped, and nothing is killed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from specwatch import paths
from specwatch.locks import file_lock
from specwatch.ranks import SshRoute

if TYPE_CHECKING:
    from specwatch.engine.remote import Remote

log = logging.getLogger("specwatch.orphans")


@dataclass(frozen=True)
class LaunchTrace:
    run_id: str
    kind: Literal["process", "container", "remote-process"]
    ident: str  # the pid, or the container id
    started: str  # the process's start time, or the container's name
    command: str  # its command line, or the image
    host: str = "local"
    route: dict[str, str | int | None] | None = None  # a remote process: how its host is reached

    @property
    def key(self) -> str:
        return f"{self.kind}-{self.ident}"


def state_dir() -> Path:
    return paths.home() / "state"


def _lock_path(run_id: str) -> Path:
    return state_dir() / "locks" / f"{run_id}.lock"


def _trace_dir() -> Path:
    return state_dir() / "launches"


@contextlib.contextmanager
def run_lock(run_id: str) -> Iterator[None]:
    """Held for as long as the run's flow process lives; the kernel releases it when that process dies."""
    path = _lock_path(run_id)
    with file_lock(path):
        yield
    path.unlink(missing_ok=True)


def _lock_is_live(run_id: str) -> bool:
    path = _lock_path(run_id)
    if not path.exists():
        return False
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


def process_identity(pid: int) -> tuple[str, str] | None:
    """(start time in clock ticks since boot, command line) of a live process; None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: fields after the last ')'
    return stat.rsplit(")", 1)[1].split()[19], cmdline


def remember_process(run_id: str, pid: int) -> LaunchTrace | None:
    identity = process_identity(pid)
    if identity is None:
        return None
    trace = LaunchTrace(run_id, "process", str(pid), identity[0], identity[1])
    _write(trace)
    return trace


def remote_identity(remote: Remote, pid: int) -> tuple[str, str] | None:
    """(start time, command line) of a process on a remote host, as its ps prints them."""
    code, out, _ = remote.run(f"ps -o lstart= -p {pid} && ps -o args= -p {pid}")
    lines = out.strip().splitlines()
    return (lines[0].strip(), lines[1].strip()) if code == 0 and len(lines) >= 2 else None


def remember_remote(run_id: str, remote: Remote, pid: int) -> LaunchTrace | None:
    identity = remote_identity(remote, pid)
    if identity is None:
        return None
    route = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(remote.route).items()}
    trace = LaunchTrace(run_id, "remote-process", str(pid), identity[0], identity[1], remote.name, route)
    _write(trace)
    return trace


def remember_container(run_id: str, container_id: str, name: str, image: str) -> LaunchTrace:
    trace = LaunchTrace(run_id, "container", container_id, name, image)
    _write(trace)
    return trace


def _write(trace: LaunchTrace) -> None:
    folder = _trace_dir() / trace.run_id
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{trace.key}.tmp"
    tmp.write_text(json.dumps(asdict(trace)))
    tmp.replace(folder / f"{trace.key}.json")


def forget(trace: LaunchTrace | None) -> None:
    if trace is None:
        return
    (_trace_dir() / trace.run_id / f"{trace.key}.json").unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        (_trace_dir() / trace.run_id).rmdir()  # the run's last one


def _same_process(pid: int, trace: LaunchTrace) -> bool:
    """The recorded process still lives. Its start time identifies it: a reused pid belongs to a later
    process. Its command line may not: a launcher's `bash -c` execs the server, so the line recorded at
    spawn can be the shell's."""
    identity = process_identity(pid)
    if identity is None or identity[0] != trace.started:
        return False
    try:  # a zombie has exited; only its parent's wait is missing
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _stop_process(trace: LaunchTrace) -> str:
    pid = int(trace.ident)
    if not _same_process(pid, trace):
        return f"process {pid} of run {trace.run_id} is gone or its pid was reused: record dropped, nothing killed"
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)  # launched servers lead their own process group
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _same_process(pid, trace):
            time.sleep(0.1)
        if not _same_process(pid, trace):
            return f"stopped orphan process group {pid} of run {trace.run_id} ({trace.command[:80]})"
    return f"orphan process {pid} of run {trace.run_id} did not stop"


def _stop_container(trace: LaunchTrace) -> str:
    from docker.errors import NotFound

    from specwatch.engine import docker as engine_api

    try:
        container = engine_api.client().containers.get(trace.ident)
    except NotFound:
        return f"container {trace.started} of run {trace.run_id} is gone: record dropped"
    if container.labels.get("specwatch.run") != trace.run_id:
        return f"container {trace.ident[:12]} is not run {trace.run_id}'s: record dropped, nothing stopped"
    with contextlib.suppress(Exception):
        container.stop(timeout=3)
    container.remove(force=True)
    return f"stopped and removed orphan container {trace.started} of run {trace.run_id}"


def _stop_remote(trace: LaunchTrace) -> str:
    from specwatch.engine.remote import Remote

    assert trace.route is not None
    route: dict[str, object] = dict(trace.route)
    for key in ("key_file", "known_hosts"):
        route[key] = Path(str(route[key])) if route.get(key) else None
    remote = Remote(SshRoute(**route))  # type: ignore[arg-type]  # the fields asdict wrote
    pid = int(trace.ident)
    if remote_identity(remote, pid) != (trace.started, trace.command):
        return f"process {pid} on {trace.host} of run {trace.run_id} is gone or its pid was reused: record dropped"
    for sig, wait_s in (("TERM", 10.0), ("KILL", 5.0)):
        remote.signal_group(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and remote.alive(pid):
            time.sleep(0.5)
        if not remote.alive(pid):
            return f"stopped orphan process group {pid} on {trace.host} of run {trace.run_id}"
    return f"orphan process {pid} on {trace.host} of run {trace.run_id} did not stop"


# how each kind of record is stopped
STOPPERS = {"process": _stop_process, "container": _stop_container, "remote-process": _stop_remote}


def sweep() -> list[str]:
    """Stop every orphan this state dir knows of; one line per record handled."""
    done = []
    for path in sorted(_trace_dir().glob("*/*.json")) if _trace_dir().is_dir() else []:
        trace = LaunchTrace(**json.loads(path.read_text()))
        if _lock_is_live(trace.run_id):
            continue
        try:
            message = STOPPERS[trace.kind](trace)
        except Exception as exc:  # an engine that is down: keep the record, say why
            done.append(f"orphan {trace.kind} {trace.ident[:12]} of run {trace.run_id} not checked: {exc}")
            continue
        forget(trace)
        log.warning("%s", message)
        done.append(message)
    return done
