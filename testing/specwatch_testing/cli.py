"""`specwatch` as a user runs it: a subprocess with its own SPECWATCH_HOME (and Prefect home under it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SPECWATCH = Path(sys.executable).parent / "specwatch"


def specwatch(*args: str, home: Path, env: dict[str, str] | None = None,
              timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the CLI; its Prefect state (ephemeral API database, logs, artifacts) lands in home/prefect."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    full.update({"SPECWATCH_HOME": str(home), "PREFECT_HOME": str(home / "prefect"), **(env or {})})
    return subprocess.run([str(SPECWATCH), *args], capture_output=True, text=True, timeout=timeout, env=full)
