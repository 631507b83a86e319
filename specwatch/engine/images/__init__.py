"""What an image backend is: `ensure(spec) -> ImageRef` makes a vLLM available and describes it
(version, digest, how to run it).

A backend is one plugin in one file (venv.py, python.py, docker.py, endpoint.py), listed in
registry.py: it also checks the images that name it, says what an image is in a plan's words, and
which vLLM build planning should assume for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from specwatch.engine.checkpoint import LocalPython, PythonRunner
from specwatch.records import ImageRef
from specwatch.spec import ArmSpec, ImageSpec
from specwatch.spec.base import expand


class ImageError(Exception):
    """An image that cannot be built or reached; the message is one actionable line."""


class ImageBackend(Protocol):
    name: str
    containers: bool  # its images are containers, run only by launchers that run containers
    launcher: str | None  # the launcher its images always take, whatever the arm names (None: the arm's)
    # True: `package` is what the image has (installed or probed); False: the file's `package` is an
    # assumption unless written there (a container or endpoint runs whatever build it was made with)
    knows_package: bool

    def check_image(self, spec: ImageSpec, on_disk: bool) -> str | None:
        """What is wrong with an image of this backend (`on_disk`: its files are checked too)."""

    def check_arm(self, arm: ArmSpec, spec: ImageSpec) -> str | None:
        """What is wrong with `arm` running an image of this backend."""

    def describe(self, spec: ImageSpec) -> str:
        """What the image is, in a plan's words."""

    def package(self, spec: ImageSpec) -> str | None:
        """The vLLM distribution a plan assumes the image has (None: unknown here)."""

    def ensure(self, spec: ImageSpec) -> ImageRef: ...

    def built(self, spec: ImageSpec) -> ImageRef | None:
        """The image as it stands on this host, with nothing built, installed or pulled (None: not there
        yet). A plan reads the stored variances keyed by its digest before any run builds it."""


def probed(backend: ImageBackend, spec: ImageSpec) -> ImageRef | None:
    """`built` of a backend that builds nothing: its `ensure` only asks the environment or the server
    what it runs, so the image is there when that answers."""
    try:
        return backend.ensure(spec)
    except ImageError:
        return None


def installs_nothing(spec: ImageSpec) -> str | None:
    """A backend that installs nothing has no use for a wheelhouse: better refused than ignored."""
    if spec.wheelhouse is not None:
        return f"image {spec.name!r}: wheelhouse is for backends venv and docker; remove it"
    return None


def wheelhouse_missing(spec: ImageSpec, on_disk: bool) -> str | None:
    """A backend that installs from spec.wheelhouse needs it to be a folder (of wheels)."""
    if spec.wheelhouse is not None and on_disk and not expand(spec.wheelhouse).is_dir():
        return (f"image {spec.name!r}: wheelhouse {str(spec.wheelhouse)!r} is not a directory; "
                "point it at the folder of wheels (pip download -d DIR ...)")
    return None


def _python_of(ref: ImageRef) -> PythonRunner | None:
    """Where an image runs a script with its own packages (the model generator needs its torch)."""
    if ref.python is not None:
        return LocalPython(ref.python)
    if ref.ref is not None:
        from specwatch.engine.docker import ContainerPython  # the Docker SDK: only for container images

        return ContainerPython(ref.ref)
    return None


def model_python(refs: Iterable[ImageRef]) -> PythonRunner | None:
    """The python that prepares a run's model: the first image's, in the experiment's order, that has one."""
    return next((p for r in refs if (p := _python_of(r)) is not None), None)
