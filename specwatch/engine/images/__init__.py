"""Image backends, by name: `ensure(spec) -> ImageRef` makes a vLLM available and describes it
(version, digest, how to run it). `backend_for` is the one place that picks one.
"""

from __future__ import annotations

from typing import Protocol

from specwatch.engine.checkpoint import LocalPython, PythonRunner
from specwatch.records import ImageRef
from specwatch.spec import ImageSpec


class ImageError(Exception):
    """An image that cannot be built or reached; the message is one actionable line."""


class ImageBackend(Protocol):
    name: str

    def ensure(self, spec: ImageSpec) -> ImageRef: ...


BACKENDS: dict[str, ImageBackend] = {}


def register(backend: ImageBackend) -> ImageBackend:
    BACKENDS[backend.name] = backend
    return backend


def backend_for(spec: ImageSpec) -> ImageBackend:
    return BACKENDS[spec.backend]


def python_of(ref: ImageRef) -> PythonRunner | None:
    """Where an image runs a script with its own packages (the model generator needs its torch)."""
    if ref.python is not None:
        return LocalPython(ref.python)
    if ref.ref is not None:
        from specwatch.engine.docker import ContainerPython  # the Docker SDK: only for container images

        return ContainerPython(ref.ref)
    return None


# The built-in backends register themselves on import.
from specwatch.engine.images import docker, endpoint, python, venv  # noqa: E402, F401
