"""vLLM's OpenAI server in a container of the arm's image, on the host network.

Equivalent to `docker run -d --name <run>-<arm>-b<block> --label specwatch.run=<run> --network host
--ipc host --env ... -v <model>:<model>:ro <image> python3 -m vllm.entrypoints.openai.api_server ...`
(recorded as such, secrets redacted). The container's output goes into the arm dir's server.log;
stopping is `docker stop -t 3`, then `docker rm -f`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specwatch.engine import processes
from specwatch.engine.handle import ServerHandle
from specwatch.engine.launchers import LaunchContext, LaunchError, free_port, register, server_env
from specwatch.engine.launchers.vllm import VLLM_ENTRYPOINT, server_args
from specwatch.records import ImageRef, LaunchRecord
from specwatch.redact import redact_argv, redact_env
from specwatch.spec import ArmSpec

if TYPE_CHECKING:
    from docker.models.containers import Container

STOP_GRACE_S = 3
ENTRYPOINT = ["python3", "-m", VLLM_ENTRYPOINT]
# A headless rank runs `vllm serve --headless`: the OpenAI server's module accepts --headless but
# ignores it (vLLM 0.32) and would start an engine of its own on a follower node.
HEADLESS_ENTRYPOINT = ["vllm", "serve"]


@dataclass
class ContainerMember:
    container: Container
    log_path: Path | None
    host: str = "127.0.0.1"
    port: int | None = None
    role: str = "server"

    def exit_code(self) -> int | None:
        from docker.errors import NotFound

        try:
            self.container.reload()
        except NotFound:
            return -1  # removed behind our back: it is not running
        state = self.container.attrs.get("State", {})
        return None if state.get("Running") else int(state.get("ExitCode", -1))

    def stop(self) -> None:
        from docker.errors import APIError, NotFound

        with contextlib.suppress(APIError, NotFound):  # already gone or stopping: removal settles it
            self.container.stop(timeout=STOP_GRACE_S)
        with contextlib.suppress(NotFound):
            self.container.remove(force=True)
        processes.untrack(("container", self.container.id))


def rank_name(launch_name: str, rank: int) -> str:
    return f"{launch_name}-r{rank}"


def docker_run_argv(name: str, labels: dict[str, str], env: dict[str, str], model: Path, ref: str,
                    args: list[str], env_file: str | None = None, headless: bool = False) -> list[str]:
    """The `docker run` a user would type for the same container (provenance; secrets redacted by the caller)."""
    argv = ["docker", "run", "-d", "--name", name]
    argv += [f"--label={k}={v}" for k, v in labels.items()]
    argv += ["--network", "host", "--ipc", "host"]
    argv += [f"--env={k}={v}" for k, v in env.items()]
    argv += ["--env-file", env_file] if env_file else []
    entry = HEADLESS_ENTRYPOINT if headless else ENTRYPOINT
    return argv + ["-v", f"{model}:{model}:ro", "--entrypoint", entry[0], ref, *entry[1:], *args]


class DockerLauncher:
    name = "docker"
    boot_log_has_config = True

    def start(self, arm: ArmSpec, image: ImageRef, ctx: LaunchContext) -> ServerHandle:
        from specwatch.engine import docker as engine_api

        if image.ref is None:
            raise LaunchError(f"arm {arm.name}: launcher docker needs a container image (backend docker); "
                              f"image {image.name} is a {image.backend} image")
        port = free_port(ctx.host)
        args = server_args(arm, ctx, port)
        env = server_env(arm, image)
        name = ctx.launch_name or f"specwatch-{port}"
        labels = {"specwatch.run": ctx.run_id, "specwatch.launch": name}
        log_path = ctx.arm_dir / "server.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            engine = engine_api.client()
            container = engine.containers.run(
                image.ref, args, entrypoint=ENTRYPOINT, name=name, detach=True, labels=labels,
                network_mode="host", ipc_mode="host", environment=env,
                volumes={str(ctx.model_dir): {"bind": str(ctx.model_dir), "mode": "ro"}},
            )
        except engine_api.EngineError as exc:
            raise LaunchError(f"arm {arm.name}: {exc}") from None
        except Exception as exc:  # the SDK's API errors: a refused run is the arm's failure, with why
            raise LaunchError(f"arm {arm.name}: the engine refused to run {image.ref}: {exc}") from None
        member = ContainerMember(container, log_path, host=ctx.host, port=port)
        processes.track(("container", container.id), member)
        engine_api.follow_logs(container, log_path)
        record = LaunchRecord(
            launcher=self.name, base_url=f"http://{ctx.host}:{port}", log_path=log_path,
            argv=redact_argv(docker_run_argv(name, labels, redact_env(env), ctx.model_dir, image.ref, args)),
            env=redact_env(env),
        )
        return ServerHandle(base_url=record.base_url, record=record, members=[member], secrets=env)


register(DockerLauncher())
