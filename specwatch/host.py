"""Facts about the machine a run happened on, recorded as provenance."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path

from specwatch.engine import gpu
from specwatch.records import HostFacts


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def host_facts() -> HostFacts:
    gpus = gpu.gpus()
    first = gpus[0] if gpus else None
    return HostFacts(
        hostname=socket.gethostname(),
        platform=platform.platform(),
        python=platform.python_version(),
        cpu_model=_cpu_model(),
        cpu_count=os.cpu_count(),
        gpu_model=first.name if first else None,
        gpu_count=len(gpus),
        gpu_driver=first.driver if first else None,
        gpu_memory_mib=first.total_mib if first else None,
    )
