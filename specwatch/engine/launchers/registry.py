"""Every launcher, in one list, and the one place that picks an arm's.

An arm's `launcher:` names one that `named_by_arms`; an image backend with a `launcher` of its
own (an endpoint: already running) takes that one instead.
"""

from __future__ import annotations

from specwatch.engine.images.registry import BACKENDS
from specwatch.engine.launchers import Launcher, Stopper, command, docker, endpoint, vllm
from specwatch.records import ImageRef
from specwatch.spec import ArmSpec, ImageSpec

LAUNCHERS: dict[str, Launcher] = {x.name: x for x in (vllm.PLUGIN, command.PLUGIN, docker.PLUGIN, endpoint.PLUGIN)}


def launcher_for(arm: ArmSpec, image: ImageRef | ImageSpec) -> Launcher:
    return LAUNCHERS[BACKENDS[image.backend].launcher or arm.launcher]


def stoppers() -> dict[str, Stopper]:
    """Per kind of leftover a launch records, how it is stopped (engine.orphans.sweep)."""
    return {kind: stop for launcher in LAUNCHERS.values() for kind, stop in launcher.stoppers.items()}
