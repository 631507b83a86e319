"""A launcher in one file, as a new one is written: it starts the fake vLLM server with the arm's
speculative config. A test lists it with one line (monkeypatch.setitem(LAUNCHERS, PLUGIN.name, PLUGIN)),
the stand-in for its line in specwatch/engine/launchers/registry.py."""

from __future__ import annotations

from specwatch.engine.handle import ServerHandle
from specwatch.engine.launchers import PROCESS_STOPPERS, LaunchContext, free_port, spawn_server
from specwatch.engine.platforms import Platform
from specwatch.ranks import Rank
from specwatch.records import ImageRef
from specwatch.spec import ArmSpec, ExperimentSpec, ImageSpec
from specwatch_testing.server import fake_vllm_argv


class ThrowawayLauncher:
    name = "throwaway"
    boot_log_has_config = False  # the fake server logs no config: k comes from /metrics
    named_by_arms = True
    boots = True
    containers = False
    stoppers = PROCESS_STOPPERS  # a process here (or over SSH), as vllm's
    started: list[int] = []  # the ports of the servers it started

    def check_arm(self, arm: ArmSpec) -> str | None:
        return None if arm.speculative else f"arm {arm.name!r}: launcher throwaway needs speculative"

    def check_launch(self, arm: ArmSpec, image: ImageSpec, spec: ExperimentSpec) -> str | None:
        return f"arm {arm.name!r}: launcher throwaway runs one server, not ranks" if arm.ranks else None

    def plan_argv(self, arm: ArmSpec, platform: Platform, ctx: LaunchContext, rank: Rank | None, launch: str,
                  image: ImageSpec) -> list[str]:
        return self._argv("<port>", arm, ctx)  # the port exists at run time

    def start(self, arm: ArmSpec, image: ImageRef, ctx: LaunchContext) -> ServerHandle:
        port = free_port(ctx.host)
        self.started.append(port)
        return spawn_server(self._argv(port, arm, ctx), arm, image, ctx, port, self.name)

    def _argv(self, port: int | str, arm: ArmSpec, ctx: LaunchContext) -> list[str]:
        assert arm.speculative is not None  # check_arm
        return fake_vllm_argv(port, ["--served-model-name", ctx.served_name, "--step-ms", "5",
                                     "--spec-config", arm.speculative.config_json()])


PLUGIN = ThrowawayLauncher()
