"""GPU memory on this host, read with nvidia-smi: the precheck before a launch (an earlier server
or a stray process holding the GPU makes vLLM fail at boot, or measure a shared GPU)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from specwatch.cmdline import flag_value
from specwatch.engine.platforms import GPU_MEMORY_UTILIZATION as DEFAULT_UTILIZATION

QUERY_GPUS = ["--query-gpu=index,name,memory.total,memory.used,driver_version", "--format=csv,noheader,nounits"]
QUERY_APPS = ["--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader,nounits"]



@dataclass(frozen=True)
class GpuMemory:
    index: int
    name: str
    total_mib: float
    used_mib: float
    driver: str | None = None

    @property
    def free_mib(self) -> float:
        return self.total_mib - self.used_mib


def parse_gpus(csv: str) -> list[GpuMemory]:
    out = []
    for line in csv.strip().splitlines():
        index, name, total, used, *driver = (part.strip() for part in line.split(","))
        out.append(GpuMemory(int(index), name, float(total), float(used), driver[0] if driver else None))
    return out


def _smi(args: list[str]) -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def gpus() -> list[GpuMemory]:
    """This host's GPUs; none without nvidia-smi (or when it fails)."""
    return parse_gpus(_smi(QUERY_GPUS) or "")


def utilization(args: list[str]) -> float:
    """The arm's --gpu-memory-utilization, vLLM's default when it sets none."""
    value = flag_value(args, "--gpu-memory-utilization")
    return DEFAULT_UTILIZATION if value is None else float(value)


def precheck(args: list[str]) -> str | None:
    """Why a launch must not start here (too little GPU memory free, and who holds it), or None."""
    want = utilization(args)
    short = [g for g in gpus() if g.free_mib < want * g.total_mib]  # no GPU on this host: none
    if not short:
        return None
    holders = (_smi(QUERY_APPS) or "").strip().replace("\n", "; ") or "no compute process listed"
    return "; ".join(f"GPU {g.index} ({g.name}) has {g.free_mib:.0f} of {g.total_mib:.0f} MiB free, the arm "
                     f"needs {want:.0%} (--gpu-memory-utilization)" for g in short) + f"; held by: {holders}"
