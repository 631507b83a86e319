"""GPU memory on this host, read with nvidia-smi: the precheck before a launch (an earlier server
or a stray process holding the GPU makes vLLM fail at boot, or measure a shared GPU)."""

from __future__ import annotations

import shutil
import subprocess
import time
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


@dataclass(frozen=True)
class GpuApp:
    """One compute process nvidia-smi lists (QUERY_APPS)."""

    gpu_uuid: str
    pid: int
    name: str
    used_mib: float


def parse_apps(csv: str) -> list[GpuApp]:
    out = []
    for line in csv.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4 or not parts[1].isdigit():
            continue  # "[N/A]" rows (no permission to see the process) say nothing about ours
        used = parts[3].removesuffix(" MiB")
        out.append(GpuApp(parts[0], int(parts[1]), parts[2], float(used) if used.replace(".", "").isdigit() else 0.0))
    return out


def still_held(apps: list[GpuApp], pids: set[int]) -> str | None:
    """What of a stopped server still holds GPU memory: its pids that nvidia-smi still lists, or None."""
    held = [a for a in apps if a.pid in pids]
    if not held:
        return None
    return "; ".join(f"pid {a.pid} ({a.name}) holds {a.used_mib:.0f} MiB on {a.gpu_uuid}" for a in held)


def gpu_present() -> bool:
    return shutil.which("nvidia-smi") is not None


def released_after_stop(pids: set[int], timeout_s: float = 30.0, poll_s: float = 1.0) -> str | None:
    """Wait until no process of a stopped server (`pids`) holds GPU memory; what still does after `timeout_s`.

    The driver frees a killed process's memory a moment after it exits; a process stuck in the driver
    keeps it, and the next launch would then fail or share the GPU. No nvidia-smi (a CPU host): None at once.
    """
    if not pids or not gpu_present():
        return None
    deadline = time.monotonic() + timeout_s
    while True:
        csv = _smi(QUERY_APPS)
        held = still_held(parse_apps(csv), pids) if csv is not None else None
        if held is None or time.monotonic() >= deadline:
            return None if held is None else f"GPU memory still held {timeout_s:.0f}s after the server stopped: {held}"
        time.sleep(poll_s)
