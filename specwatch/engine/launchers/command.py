"""A team's own serve script, from a template; it must still answer the OpenAI API and /metrics."""

from __future__ import annotations

import shlex
import sys

from specwatch import templates
from specwatch.engine.handle import ServerHandle
from specwatch.engine.launchers import PROCESS_STOPPERS, LaunchContext, free_port, spawn_server, vllm
from specwatch.engine.platforms import Platform
from specwatch.ranks import Rank
from specwatch.records import ImageRef
from specwatch.spec import ArmSpec, ExperimentSpec, ImageSpec

# What a command template may use ({python} {port} ...); check_arm checks the template against it.
COMMAND_FIELDS = ("python", "port", "host", "model", "served_name", "k", "spec_config", "args")


class CommandLauncher:
    name = "command"
    boot_log_has_config = False  # a team's script may log anything: k comes from /metrics
    named_by_arms = True
    boots = True
    containers = False
    stoppers = PROCESS_STOPPERS

    def check_arm(self, arm: ArmSpec) -> str | None:
        if not arm.command:
            return f"arm {arm.name!r}: launcher command needs command (a template with {{port}})"
        try:
            templates.check(arm.command, COMMAND_FIELDS)
        except templates.TemplateError as exc:
            return f"arm {arm.name!r}: command {exc}"
        return None

    def check_launch(self, arm: ArmSpec, image: ImageSpec, spec: ExperimentSpec) -> str | None:
        return None

    def plan_argv(self, arm: ArmSpec, platform: Platform, ctx: LaunchContext, rank: Rank | None, launch: str,
                  image: ImageSpec) -> list[str]:
        # as the plan has always shown it: vLLM's own server with the arm's args, not the team's script
        return vllm.PLUGIN.plan_argv(arm, platform, ctx, rank, launch, image)

    def start(self, arm: ArmSpec, image: ImageRef, ctx: LaunchContext) -> ServerHandle:
        port = free_port(ctx.host)
        assert arm.command is not None  # check_arm refused an arm without one
        values = {
            "python": str(image.python or sys.executable),
            "port": str(port),
            "host": ctx.host,
            "model": str(ctx.model_dir),
            "served_name": ctx.served_name,
            "k": str(arm.k or 0),
            "spec_config": arm.speculative.config_json() if arm.speculative else "",
            "args": " ".join(shlex.quote(a) for a in arm.args),
        }
        assert values.keys() == set(COMMAND_FIELDS)  # check_arm checked the template against these
        quoted = {k: v if k == "args" else shlex.quote(v) for k, v in values.items()}
        return spawn_server(["bash", "-c", templates.fill(arm.command, quoted)], arm, image, ctx, port, self.name)


PLUGIN = CommandLauncher()
