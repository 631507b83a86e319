"""The environment every launched process starts from: this one's, less what makes a Python
process use specwatch's own packages. A server must import its own vLLM, never ours.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

# Variables that point an interpreter at another environment's packages.
PYTHON_ENV_VARS = ("PYTHONPATH", "PYTHONHOME", "PYTHONEXECUTABLE", "VIRTUAL_ENV", "VIRTUAL_ENV_PROMPT",
                   "__PYVENV_LAUNCHER__")


def clean_environ(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default os.environ) without PYTHON_ENV_VARS and without specwatch's venv on PATH."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in PYTHON_ENV_VARS}
    ours = {str(Path(sys.prefix) / "bin")} | ({str(Path(v) / "bin")} if (v := os.environ.get("VIRTUAL_ENV")) else set())
    if "PATH" in env:
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p not in ours)
    return env
