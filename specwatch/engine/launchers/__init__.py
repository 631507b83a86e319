"""What a launcher is, and what launchers share: starting a server process here, in a namespace or
over SSH, its environment and its record, and stopping a leftover one.

A launcher is one plugin in one file (vllm.py, command.py, docker.py, endpoint.py), listed in
registry.py: it starts a server for one launch of one arm and returns a handle that always stops
what it started; it checks the arms that name it, shows its launch in a plan, and stops what a
killed run of it left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from specwatch.engine import orphans, processes
from specwatch.engine.environ import clean_environ
from specwatch.engine.handle import Member, ProcessMember, ServerHandle
from specwatch.engine.launch_errors import BootExit as BootExit  # what launching raises, for the launchers' users
from specwatch.engine.launch_errors import LaunchError as LaunchError
from specwatch.engine.orphans import LaunchTrace
from specwatch.engine.placement import placement
from specwatch.engine.platforms import Platform, platform_of
from specwatch.engine.remote import Remote, RemoteMember, stop_remote  # asyncssh itself: only for remote hosts
from specwatch.ranks import DEFAULT_RANK_ENV, Rank, SshRoute
from specwatch.records import ImageRef, LaunchRecord, RankRecord
from specwatch.redact import redact_argv, redact_env, secret_values
from specwatch.spec import ArmSpec, ExperimentSpec, ImageSpec


@dataclass(frozen=True)
class LaunchContext:
    model_dir: Path
    served_name: str
    arm_dir: Path
    max_model_len: int | None = None
    host: str = "127.0.0.1"  # where the server binds and the client reaches it
    run_id: str = ""
    launch_name: str = ""  # <run>-<arm>-b<round>: names the launch's containers
    ranks: tuple[Rank, ...] = ()  # a multi-rank arm's ranks, rendered (specwatch.ranks)
    ssh: SshRoute | None = None  # a single-server arm on a remote host
    netns: str | None = None  # ... or in a namespace of this machine
    max_concurrency: int = 0  # the workload's most requests in flight (a GPU server's --max-num-seqs floor)
    cpu_share: str = "cores"  # design.cpu_share: how a CPU server here shares the cores with the client


Stopper = Callable[[LaunchTrace], str]  # stops a leftover a launch recorded; says what it did


class Launcher(Protocol):
    name: str
    boot_log_has_config: bool  # the server logs vLLM's resolved config at boot (k is confirmed from it)
    named_by_arms: bool  # an arm's `launcher:` may name it; else an image backend picks it (see registry)
    boots: bool  # it starts a server (a launch to count, time and show in a plan)
    containers: bool  # it runs container images (an image backend's that are containers), and nothing else
    stoppers: Mapping[str, Stopper]  # per kind of LaunchTrace it records, how a leftover one is stopped

    def check_arm(self, arm: ArmSpec) -> str | None:
        """What is wrong with an arm that names this launcher, alone (resolve: at the arm's place)."""

    def check_launch(self, arm: ArmSpec, image: ImageSpec, spec: ExperimentSpec) -> str | None:
        """What is wrong with launching `arm` of `image` in `spec` (resolve: of the file as a whole)."""

    def plan_argv(self, arm: ArmSpec, platform: Platform, ctx: LaunchContext, rank: Rank | None, launch: str,
                  image: ImageSpec) -> list[str]:
        """The launch `specwatch validate --plan` shows: `<port>`, `<run>` stand for what exists at run time."""

    def start(self, arm: ArmSpec, image: ImageRef, ctx: LaunchContext) -> ServerHandle: ...


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` when it is an address of this machine; for a remote host, one free here
    (the best guess without a round trip; a taken port fails the boot with the server's log)."""
    with socket.socket() as s:
        try:
            s.bind((host, 0))
        except OSError:
            s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_env(arm: ArmSpec, image: ImageRef) -> dict[str, str]:
    """What specwatch sets for the server on top of its own environment (recorded, redacted).

    NVLink multicast off on every server, single or ranked, local or over SSH, unless the arm sets
    it: the GPU hosts' notes require it (NCCL_NVLS_ENABLE=0).
    """
    env = {"HF_HUB_OFFLINE": "1", **DEFAULT_RANK_ENV}
    env.update({name: value for name, value in platform_of(image.package).env.items() if name not in os.environ})
    env.update(arm.env)
    return env


def start_process(argv: list[str], env: dict[str, str], log_path: Path, ctx: LaunchContext, *, address: str,
                  port: int | None, role: str = "server", grace_s: float = 20.0, ssh: SshRoute | None = None,
                  netns: str | None = None) -> Member:
    """One server process in its own process group: here, in a namespace of this machine, or on a
    host over SSH (there it gets only what specwatch sets, not this machine's environment)."""
    if ssh is not None:
        remote = Remote(ssh)
        remote_log = f"{ssh.workdir}/{ctx.launch_name or 'launch'}/{log_path.name}"
        member = RemoteMember(remote, remote.spawn(argv, env, remote_log), remote_log, log_path, port, role, grace_s,
                              run_id=ctx.run_id)
        processes.track(("remote", ssh.host, member.pid), member)
        return member
    if netns is not None:  # a namespace of this machine standing in for the host
        argv = ["ip", "netns", "exec", netns, *argv]
    proc = processes.spawn(argv, {**clean_environ(), **env}, log_path)
    return ProcessMember(proc, log_path, host=address, port=port, role=role, grace_s=grace_s,
                         trace=traced(ctx, proc.pid), local_port=netns is None)


def spawn_server(argv: list[str], arm: ArmSpec, image: ImageRef, ctx: LaunchContext, port: int,
                 launcher: str) -> ServerHandle:
    """One server process in its own group, logging into the arm dir (on ctx.ssh's host, if set)."""
    place = placement(image, ctx.cpu_share, local=ctx.ssh is None and ctx.netns is None)
    env = {**place.env, **server_env(arm, image)}
    log_path = ctx.arm_dir / "server.log"
    argv = [*place.prefix, *argv]
    record = LaunchRecord.model_validate(dict(
        launcher=launcher, base_url=f"http://{ctx.host}:{port}", argv=redact_argv(argv), env=redact_env(env),
        log_path=log_path, client_cores=place.client_cores,
    ))
    member = start_process(argv, env, log_path, ctx, address=ctx.host, port=port, ssh=ctx.ssh, netns=ctx.netns)
    return ServerHandle(base_url=record.base_url, record=record, members=[member], secrets=secret_values(env, argv))


def rank_record(rank: Rank, argv: list[str], env: dict[str, str], log_path: Path) -> RankRecord:
    """A rank's provenance: where it ran, its command line and env (redacted), its env's hash, its GPUs."""
    return RankRecord(rank=rank.index, role=rank.role, host=rank.host, address=rank.address, argv=redact_argv(argv),
                      env=redact_env(env), env_hash=rank.env_hash, gpu=env.get("CUDA_VISIBLE_DEVICES"),
                      log_path=log_path)


def traced(ctx: LaunchContext, pid: int) -> LaunchTrace | None:
    """Record a launched process in the state dir while a run owns it (the orphan rule)."""
    identity = orphans.process_identity(pid) if ctx.run_id else None
    return orphans.remember(LaunchTrace(ctx.run_id, "process", str(pid), *identity)) if identity else None


def _same_process(pid: int, trace: LaunchTrace) -> bool:
    """The recorded process still lives. Its start time identifies it: a reused pid belongs to a later
    process. Its command line may not: a launcher's `bash -c` execs the server, so the line recorded at
    spawn can be the shell's."""
    identity = orphans.process_identity(pid)
    if identity is None or identity[0] != trace.started:
        return False
    try:  # a zombie has exited; only its parent's wait is missing
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop_process(trace: LaunchTrace) -> str:
    """A leftover server process group of this machine (`traced`), if it is still the one recorded."""
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


# What `start_process` leaves behind when its run is killed: a process here, or one on a host over SSH.
PROCESS_STOPPERS: Mapping[str, Stopper] = {"process": stop_process, "remote-process": stop_remote}
