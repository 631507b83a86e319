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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from specwatch import paths
from specwatch.locks import file_lock

log = logging.getLogger("specwatch.orphans")


@dataclass(frozen=True)
class LaunchTrace:
    run_id: str
    kind: str  # what was launched: a key of its launcher's stoppers (process, container, remote-process, ...)
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


def remember(trace: LaunchTrace) -> LaunchTrace:
    """Record a launched process or container in the state dir while its run owns it (the orphan rule)."""
    folder = _trace_dir() / trace.run_id
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{trace.key}.tmp"
    tmp.write_text(json.dumps(asdict(trace)))
    tmp.replace(folder / f"{trace.key}.json")
    return trace


def forget(trace: LaunchTrace | None) -> None:
    if trace is None:
        return
    (_trace_dir() / trace.run_id / f"{trace.key}.json").unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        (_trace_dir() / trace.run_id).rmdir()  # the run's last one


def sweep(stoppers: Mapping[str, Callable[[LaunchTrace], str]]) -> list[str]:
    """Stop every orphan this state dir knows of, each by its launcher's stopper for its kind
    (specwatch.engine.launchers.registry.stoppers()); one line per record handled."""
    done = []
    for path in sorted(_trace_dir().glob("*/*.json")) if _trace_dir().is_dir() else []:
        trace = LaunchTrace(**json.loads(path.read_text()))
        if _lock_is_live(trace.run_id):
            continue
        try:
            message = stoppers[trace.kind](trace)
        except Exception as exc:  # an engine that is down: keep the record, say why
            done.append(f"orphan {trace.kind} {trace.ident[:12]} of run {trace.run_id} not checked: {exc}")
            continue
        forget(trace)
        log.warning("%s", message)
        done.append(message)
    return done
