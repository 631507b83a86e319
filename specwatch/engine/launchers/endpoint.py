"""An already-running server: nothing to start, nothing to stop."""

from __future__ import annotations

from specwatch.engine.handle import ServerHandle
from specwatch.engine.launchers import LaunchContext, register
from specwatch.records import ImageRef, LaunchRecord
from specwatch.spec import ArmSpec


class EndpointLauncher:
    name = "endpoint"
    boot_log_has_config = False  # no boot seen

    def start(self, arm: ArmSpec, image: ImageRef, ctx: LaunchContext) -> ServerHandle:
        assert image.url is not None
        url = image.url.rstrip("/")
        return ServerHandle(base_url=url, record=LaunchRecord(launcher="endpoint", base_url=url))


register(EndpointLauncher())
