"""A ServerHandle owns everything one launch started: one or more members (processes now;
containers and remote ranks are members too), each with its own log, host and port.

It is a context manager whose stop reaches every member, in reverse start order.
"""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from specwatch.engine import gpu, orphans, processes
from specwatch.engine.orphans import LaunchTrace
from specwatch.records import LaunchRecord
from specwatch.redact import redact_text


class Member(Protocol):
    role: str  # "server" for a single-process launch; "head" / "worker" for ranks
    host: str
    port: int | None
    log_path: Path | None

    def exit_code(self) -> int | None:
        """None while it runs."""
        ...

    def sync_log(self) -> None:
        """Bring log_path up to date (a remote member's log is on its host)."""
        ...

    def stop(self) -> None: ...

    def local_pid(self) -> int | None:
        """The pid on this machine at the top of its process tree, where that is not below specwatch's own
        (a container's init, a rank on a loopback "remote" host); host load counts that tree as the run's."""
        ...


@dataclass
class ProcessMember:
    proc: subprocess.Popen[bytes]
    log_path: Path | None
    host: str = "127.0.0.1"
    port: int | None = None  # None: a member that serves no HTTP itself (a headless rank)
    role: str = "server"
    grace_s: float = 20.0  # SIGTERM, then SIGKILL after this long
    trace: LaunchTrace | None = None  # its record in the state dir (specwatch.engine.orphans)
    local_port: bool = True  # its port is in this machine's network namespace (no netns, no SSH)

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def foreign_listener(self) -> str | None:
        """Who else serves this member's port, when a process outside its group does (None: ours, or unknown)."""
        if self.port is None or not self.local_port:
            return None
        held = processes.listeners(self.port)
        if not held or any(processes.in_group(pid, self.proc.pid) for pid in held):
            return None
        pid = min(held)
        cmd = orphans.process_identity(pid)
        return f"pid {pid}" + (f" ({cmd[1][:80]})" if cmd else "")

    def sync_log(self) -> None:
        pass  # the process writes log_path itself

    def local_pid(self) -> int | None:
        return self.proc.pid

    def stop(self) -> None:
        processes.stop(self.proc, grace_s=self.grace_s)
        orphans.forget(self.trace)


@dataclass
class ServerHandle:
    base_url: str
    record: LaunchRecord
    members: list[Member] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)  # values hidden in log tails and, once stopped, in the logs
    gpu_held: str | None = None  # after stop: what of it still holds GPU memory (specwatch.engine.gpu)

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Every member, the last started first; ranks stop in parallel so none waits on another.
        Then the secrets are scrubbed from their logs (a server may log its args: vLLM does) and, on
        a GPU host, the GPU memory its processes held is checked to be released (`gpu_held` says
        what is not)."""
        watched = {pid for m in self.members if isinstance(m, ProcessMember) and gpu.gpu_present()
                   for pid in processes.group_pids(m.proc.pid)}
        self._stop_members()
        self.scrub_logs()
        self.gpu_held = gpu.released_after_stop(watched)

    def _stop_members(self) -> None:
        if len(self.members) == 1:
            self.members[0].stop()
        else:
            threads = [threading.Thread(target=m.stop, name=f"stop-{m.role}-{i}")
                       for i, m in enumerate(reversed(self.members))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

    def scrub_logs(self) -> None:
        if not self.secrets:
            return
        for path in {m.log_path for m in self.members if m.log_path is not None}:
            try:
                text = path.read_text(errors="replace")
                scrubbed = redact_text(text, self.secrets)
                if scrubbed != text:
                    path.write_text(scrubbed)
            except OSError:
                pass  # a log that cannot be rewritten (full disk) stays as the server wrote it

    def exited(self) -> int | None:
        """The exit code of the first member that ended, None while all run."""
        return next((code for m in self.members if (code := m.exit_code()) is not None), None)

    def sync_logs(self) -> None:
        for member in self.members:
            member.sync_log()

    def foreign_listeners(self) -> list[str]:
        """'port N: pid P (cmd)' for each member whose port another process holds: a taken port."""
        return [f"port {m.port}: {who}" for m in self.members
                if isinstance(m, ProcessMember) and (who := m.foreign_listener()) is not None]

    def local_roots(self) -> list[int]:
        """Every member's process tree on this machine (engine/hostload.py: the run's, not foreign)."""
        return [pid for m in self.members if (pid := m.local_pid()) is not None]

    def dead(self) -> Member | None:
        """The first member that ended, if one did."""
        return next((m for m in self.members if m.exit_code() is not None), None)

    def log_tail(self, lines: int = 15, member: Member | None = None) -> str:
        """The last lines of a member's log (default: the launch's own log, the head's)."""
        path = member.log_path if member is not None else self.record.log_path
        if path is None or not path.exists():
            return ""
        tail = path.read_text(errors="replace").splitlines()[-lines:]
        return redact_text(" | ".join(line.strip() for line in tail if line.strip()), self.secrets)
