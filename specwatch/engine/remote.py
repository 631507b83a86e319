"""Hosts reached over SSH (asyncssh): ranks started there in their own process group, watched,
and stopped by that group, the host's key checked against known_hosts.

Every call is a short connection of its own: a launch spans minutes, and a rank's liveness
must not depend on one long-lived session.
"""

from __future__ import annotations

import asyncio
import ipaddress
import shlex
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from specwatch.engine import orphans, processes
from specwatch.engine.launch_errors import LaunchError
from specwatch.engine.orphans import LaunchTrace
from specwatch.ranks import SshRoute

if TYPE_CHECKING:
    import asyncssh

CONNECT_TIMEOUT_S = 15.0


class RemoteError(LaunchError):
    """A host that cannot be reached or trusted; the message is one line naming the host and the fix."""


class Remote:
    """Commands on one host over SSH."""

    def __init__(self, route: SshRoute) -> None:
        self.route = route
        self.name, self.address, self.user, self.port = route.host, route.address, route.user, route.port
        self.key_file, self.known_hosts = route.key_file, route.known_hosts

    async def _run(self, command: str, timeout_s: float, input: str | None = None) -> asyncssh.SSHCompletedProcess:
        import asyncssh  # only where a host is remote

        known = str((self.known_hosts or Path("~/.ssh/known_hosts")).expanduser())
        try:
            async with asyncssh.connect(
                self.address, port=self.port, username=self.user, known_hosts=known,
                client_keys=[str(self.key_file.expanduser())] if self.key_file else None,
                connect_timeout=CONNECT_TIMEOUT_S,
            ) as conn:
                return await conn.run(command, check=False, timeout=timeout_s, input=input)
        except asyncssh.HostKeyNotVerifiable as exc:
            raise RemoteError(f"host {self.name} ({self.address}:{self.port}): its host key does not match "
                              f"{known} ({exc.reason}); check the host, then update known_hosts") from None
        except asyncssh.PermissionDenied:
            raise RemoteError(f"host {self.name}: {self.user}@{self.address}:{self.port} refused the key "
                              f"{self.key_file or '(default keys)'}; fix ssh.user or ssh.key_file") from None
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            raise RemoteError(f"host {self.name} ({self.address}:{self.port}) is unreachable over SSH "
                              f"({type(exc).__name__}: {exc}); check its address, ssh.port and that sshd runs"
                              ) from None

    def run(self, command: str, timeout_s: float = 60.0, input: str | None = None) -> tuple[int, str, str]:
        done = asyncio.run(self._run(command, timeout_s, input))
        return int(done.exit_status or 0), str(done.stdout or ""), str(done.stderr or "")

    def spawn(self, argv: list[str], env: dict[str, str], log_path: str) -> int:
        """Start `argv` detached in its own session on the host; its pid is its process group."""
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        command = (f"mkdir -p {shlex.quote(str(Path(log_path).parent))} && "
                   f"setsid env {assignments} {shlex.join(argv)} > {shlex.quote(log_path)} 2>&1 < /dev/null & "
                   "echo $!")
        code, out, err = self.run(command)
        if code != 0 or not out.strip().isdigit():
            raise RemoteError(f"host {self.name}: starting {argv[0]} failed (exit {code}): {err.strip()[-200:]}")
        return int(out.strip())

    def alive(self, pid: int) -> bool:
        return self.run(f"kill -0 {pid}")[0] == 0

    def signal_group(self, pid: int, sig: str) -> None:
        self.run(f"kill -s {sig} -- -{pid} 2>/dev/null || true")  # POSIX form: dash has no `kill -SIG --`


def _identity(remote: Remote, pid: int) -> tuple[str, str] | None:
    """(start time, command line) of a process on a remote host, as its ps prints them."""
    code, out, _ = remote.run(f"ps -o lstart= -p {pid} && ps -o args= -p {pid}")
    lines = out.strip().splitlines()
    return (lines[0].strip(), lines[1].strip()) if code == 0 and len(lines) >= 2 else None


def _remember(run_id: str, remote: Remote, pid: int) -> LaunchTrace | None:
    """Record a process started on a remote host, with how to reach it again (stop_remote)."""
    identity = _identity(remote, pid)
    if identity is None:
        return None
    route = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(remote.route).items()}
    return orphans.remember(LaunchTrace(run_id, "remote-process", str(pid), identity[0], identity[1], remote.name,
                                        route))


def on_this_machine(address: str) -> bool:
    """A "remote" host on loopback (a test host, an sshd of this machine): its pids are this machine's."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


class RemoteMember:
    """A server process on a remote host, in its own process group there."""

    def __init__(self, remote: Remote, pid: int, remote_log: str, log_path: Path, port: int | None, role: str,
                 grace_s: float = 20.0, run_id: str = "") -> None:
        self.remote, self.pid, self.remote_log = remote, pid, remote_log
        self.trace = _remember(run_id, remote, pid) if run_id else None
        self.log_path: Path | None = log_path  # a local copy, refreshed when it ends or stops
        self.host, self.port, self.role, self.grace_s = remote.address, port, role, grace_s

    def sync_log(self) -> None:
        assert self.log_path is not None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text(self.remote.run(f"cat {shlex.quote(self.remote_log)} 2>/dev/null || true")[1])

    def local_pid(self) -> int | None:
        return self.pid if on_this_machine(self.host) else None

    def exit_code(self) -> int | None:
        if self.remote.alive(self.pid):
            return None
        self.sync_log()
        return -1  # gone; its exit status stayed on the host

    def stop(self) -> None:
        try:
            self.remote.signal_group(self.pid, "TERM")
            deadline = time.monotonic() + self.grace_s
            while time.monotonic() < deadline and self.remote.alive(self.pid):
                time.sleep(0.5)
            if self.remote.alive(self.pid):
                self.remote.signal_group(self.pid, "KILL")
            self.sync_log()
        finally:
            processes.untrack(("remote", self.remote.name, self.pid))
            orphans.forget(self.trace)


class RemoteContainer:
    """A container started with the docker CLI on a remote host (its own engine, DOCKER_HOST there)."""

    def __init__(self, remote: Remote, name: str, log_path: Path, port: int | None, role: str,
                 docker_host: str | None) -> None:
        self.remote, self.name = remote, name
        self.log_path: Path | None = log_path
        self.host, self.port, self.role = remote.address, port, role
        self.prefix = f"DOCKER_HOST={shlex.quote(docker_host)} " if docker_host else ""
        self._local_pid: int | None = None  # 0: not on this machine's pids, or not found

    def docker(self, args: str, timeout_s: float = 60.0) -> tuple[int, str, str]:
        return self.remote.run(f"{self.prefix}docker {args}", timeout_s)

    def sync_log(self) -> None:
        assert self.log_path is not None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        code, out, err = self.docker(f"logs {shlex.quote(self.name)}")
        self.log_path.write_text(out + err)

    def local_pid(self) -> int | None:
        # asked at every host-load sample (0.5 s): one `docker inspect` over SSH, then the answer is kept
        if self._local_pid is None and on_this_machine(self.host):
            code, out, _ = self.docker("inspect -f '{{.State.Pid}}' " + shlex.quote(self.name))
            self._local_pid = int(out.strip()) if code == 0 and out.strip().isdigit() else 0
        return self._local_pid or None

    def exit_code(self) -> int | None:
        code, out, _ = self.docker("inspect -f '{{.State.Running}} {{.State.ExitCode}}' " + shlex.quote(self.name))
        if code == 0 and out.split()[:1] == ["true"]:
            return None
        self.sync_log()
        return int(out.split()[1]) if code == 0 and len(out.split()) > 1 else -1

    def stop(self) -> None:
        try:
            self.docker(f"stop -t 3 {shlex.quote(self.name)}")
            self.sync_log()
            self.docker(f"rm -f {shlex.quote(self.name)}")
        finally:
            processes.untrack(("remote-container", self.remote.name, self.name))


def start_container(remote: Remote, argv: list[str], env: dict[str, str], env_file: str, docker_host: str | None,
                    name: str, log_path: Path, port: int | None, role: str) -> RemoteContainer:
    """`docker run` on the host with the rendered env in a 0600 file outside the run dir, deleted once
    the container has started (or failed to)."""
    folder = shlex.quote(str(Path(env_file).parent))
    body = "".join(f"{k}={v}\n" for k, v in env.items())
    code, _, err = remote.run(f"umask 077 && mkdir -p {folder} && cat > {shlex.quote(env_file)}", input=body)
    if code != 0:
        raise RemoteError(f"host {remote.name}: writing the env file {env_file} failed: {err.strip()[-200:]}")
    prefix = f"DOCKER_HOST={shlex.quote(docker_host)} " if docker_host else ""
    code, _, err = remote.run(f"{prefix}{shlex.join(argv)}; rc=$?; rm -f {shlex.quote(env_file)}; exit $rc",
                              timeout_s=300)
    if code != 0:
        raise RemoteError(f"host {remote.name}: docker run {name} failed (exit {code}): {err.strip()[-300:]}")
    member = RemoteContainer(remote, name, log_path, port, role, docker_host)
    processes.track(("remote-container", remote.name, name), member)
    return member


def stop_remote(trace: LaunchTrace) -> str:
    """A leftover server process group on a host over SSH (RemoteMember), if it is still the one recorded."""
    assert trace.route is not None
    route: dict[str, object] = dict(trace.route)
    for key in ("key_file", "known_hosts"):
        route[key] = Path(str(route[key])) if route.get(key) else None
    remote = Remote(SshRoute(**route))  # type: ignore[arg-type]  # the fields asdict wrote
    pid = int(trace.ident)
    if _identity(remote, pid) != (trace.started, trace.command):
        return f"process {pid} on {trace.host} of run {trace.run_id} is gone or its pid was reused: record dropped"
    for sig, wait_s in (("TERM", 10.0), ("KILL", 5.0)):
        remote.signal_group(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and remote.alive(pid):
            time.sleep(0.5)
        if not remote.alive(pid):
            return f"stopped orphan process group {pid} on {trace.host} of run {trace.run_id}"
    return f"orphan process {pid} on {trace.host} of run {trace.run_id} did not stop"
