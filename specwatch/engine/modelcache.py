"""A model directory in the cache, as every model source writes one: built in a temp dir beside its
target, marked complete, shared, then renamed into place; and the image python that builds it.

Below the checkpoint step and the model sources alike, so neither imports the other's callers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from specwatch.engine.environ import clean_environ

MODEL_MARKER = ".specwatch-model.json"
_STALE_TMP_S = 6 * 3600.0


class CheckpointError(Exception):
    """A checkpoint that cannot be used (or generated); the message says what to fix."""


class PythonRunner(Protocol):
    """Runs a python script with the torch + transformers of an image (its venv, or a container)."""

    def run(self, argv: list[str], env: dict[str, str], writable: Path, timeout_s: float
            ) -> subprocess.CompletedProcess[str]:
        """`python argv...`; `writable` is the one folder the script writes into."""
        ...


@dataclass(frozen=True)
class LocalPython:
    python: Path

    def run(self, argv: list[str], env: dict[str, str], writable: Path, timeout_s: float
            ) -> subprocess.CompletedProcess[str]:
        if not self.python.exists():
            raise CheckpointError(f"image python {self.python} does not exist; build the image first")
        return subprocess.run([str(self.python), *argv], check=False, capture_output=True, text=True,
                              env={**clean_environ(), **env}, timeout=timeout_s)

    def __str__(self) -> str:
        return str(self.python)


def share(root: Path) -> None:
    """mkdtemp makes 0700 dirs and safetensors writes 0600 files; the cache may be shared between users."""
    root.chmod(0o755)
    for f in root.iterdir():
        f.chmod(0o644)


def remove_stale_tmp(target: Path) -> None:
    """Temp dirs left by a killed generator; old enough that no live process owns them."""
    now = time.time()
    for old in target.parent.glob(f".tmp-{target.name}-*"):
        try:
            if now - old.stat().st_mtime > _STALE_TMP_S:
                shutil.rmtree(old, ignore_errors=True)
        except FileNotFoundError:
            pass


def commit(tmp: Path, target: Path) -> Path:
    """Rename a finished dir (its marker inside) into place: the rename is the commit point. Another
    process that won the race leaves its own, complete dir there, which is used."""
    share(tmp)
    try:
        os.rename(tmp, target)
    except OSError:
        if (target / MODEL_MARKER).is_file():
            return target
        raise
    return target
