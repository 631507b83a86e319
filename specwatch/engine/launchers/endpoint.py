"""An already-running server: nothing to start, nothing to stop."""

from __future__ import annotations

from collections.abc import Mapping

from specwatch.engine.handle import ServerHandle
from specwatch.engine.launchers import LaunchContext, Stopper
from specwatch.engine.platforms import Platform
from specwatch.ranks import Rank
from specwatch.records import ImageRef, LaunchRecord
from specwatch.spec import ArmSpec, ExperimentSpec, ImageSpec


class EndpointLauncher:
    name = "endpoint"
    boot_log_has_config = False  # no boot seen
    named_by_arms = False  # the endpoint image backend picks it
    boots = False
    containers = False
    stoppers: Mapping[str, Stopper] = {}  # it starts nothing, so nothing is left behind

    def check_arm(self, arm: ArmSpec) -> str | None:
        return None

    def check_launch(self, arm: ArmSpec, image: ImageSpec, spec: ExperimentSpec) -> str | None:
        return None

    def plan_argv(self, arm: ArmSpec, platform: Platform, ctx: LaunchContext, rank: Rank | None, launch: str,
                  image: ImageSpec) -> list[str]:
        return []

    def start(self, arm: ArmSpec, image: ImageRef, ctx: LaunchContext) -> ServerHandle:
        assert image.url is not None
        url = image.url.rstrip("/")
        return ServerHandle(base_url=url, record=LaunchRecord(launcher="endpoint", base_url=url))


PLUGIN = EndpointLauncher()
