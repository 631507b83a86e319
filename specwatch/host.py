"""Facts about the machine a run happened on, recorded as provenance."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from pathlib import Path

from specwatch.records import HostFacts


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _gpus() -> tuple[str | None, int, str | None]:
    if not shutil.which("nvidia-smi"):
        return None, 0, None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None, 0, None
    rows = [r.split(", ") for r in out.strip().splitlines() if r.strip()]
    if not rows:
        return None, 0, None
    return rows[0][0], len(rows), rows[0][1] if len(rows[0]) > 1 else None


def host_facts() -> HostFacts:
    gpu_model, gpu_count, driver = _gpus()
    return HostFacts(
        hostname=socket.gethostname(),
        platform=platform.platform(),
        python=platform.python_version(),
        cpu_model=_cpu_model(),
        cpu_count=os.cpu_count(),
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        gpu_driver=driver,
    )
