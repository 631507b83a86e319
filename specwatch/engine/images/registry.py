"""Every image backend, in one list: an image's `backend:` names one of them."""

from __future__ import annotations

from specwatch.engine.images import ImageBackend, docker, endpoint, python, venv
from specwatch.spec import ImageSpec

BACKENDS: dict[str, ImageBackend] = {b.name: b for b in (venv.PLUGIN, python.PLUGIN, docker.PLUGIN, endpoint.PLUGIN)}


def backend_for(spec: ImageSpec) -> ImageBackend:
    return BACKENDS[spec.backend]
