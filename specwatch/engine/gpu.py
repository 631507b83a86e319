"""GPU memory on this host, read with nvidia-smi: the precheck before a launch (an earlier server
or a stray process holding the GPU makes vLLM fail at boot, or measure a shared GPU)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

QUERY_GPUS = ["--query-gpu=index,name,memory.total,memory.used", "--format=csv,noheader,nounits"]
QUERY_APPS = ["--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader,nounits"]
DEFAULT_UTILIZATION = 0.9  # vLLM's --gpu-memory-utilization default


@dataclass(frozen=True)
class GpuMemory:
    index: int
    name: str
    total_mib: float
    used_mib: float

    @property
    def free_mib(self) -> float:
        return self.total_mib - self.used_mib


def parse_gpus(csv: str) -> list[GpuMemory]:
    out = []
    for line in csv.strip().splitlines():
        index, name, total, used = (part.strip() for part in line.split(","))
        out.append(GpuMemory(int(index), name, float(total), float(used)))
    return out


def _smi(args: list[str]) -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def utilization(args: list[str]) -> float:
    """The arm's --gpu-memory-utilization, vLLM's default when it sets none."""
    for i, word in enumerate(args):
        flag, eq, value = word.partition("=")
        if flag == "--gpu-memory-utilization":
            return float(value if eq else args[i + 1])
    return DEFAULT_UTILIZATION


def precheck(args: list[str]) -> str | None:
    """Why a launch must not start here (too little GPU memory free, and who holds it), or None."""
    csv = _smi(QUERY_GPUS)
    if csv is None:
        return None  # no GPU on this host
    want = utilization(args)
    short = [g for g in parse_gpus(csv) if g.free_mib < want * g.total_mib]
    if not short:
        return None
    holders = (_smi(QUERY_APPS) or "").strip().replace("\n", "; ") or "no compute process listed"
    return "; ".join(f"GPU {g.index} ({g.name}) has {g.free_mib:.0f} of {g.total_mib:.0f} MiB free, the arm "
                     f"needs {want:.0%} (--gpu-memory-utilization)" for g in short) + f"; held by: {holders}"
