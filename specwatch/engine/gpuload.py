"""Interference on a GPU, through NVML (nvidia-ml-py): compute processes on the arm's GPUs that are not the
run's, their memory, the SM clock against its maximum, and NVML's clock event (throttle) reasons.

Where NVML cannot be loaded or sees no GPU, nothing fails: `GpuWatch.open` returns a watch whose `error` says
"not measured: ..." and which samples nothing, and every cell records that line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# NVML's clock event reasons (nvmlClocksEventReason*; older bindings: ClocksThrottleReason*), by the
# name a report shows. "idle" and "applications clocks" are not interference and are left out.
REASONS = {
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clocks": 0x100,
}


@dataclass(frozen=True)
class GpuSample:
    foreign_processes: int
    foreign_memory_mib: float
    sm_clock_ratio: float | None
    reasons: frozenset[str]


def reason_names(mask: int) -> frozenset[str]:
    return frozenset(name for name, bit in REASONS.items() if mask & bit)


class GpuWatch:
    """NVML handles of the GPUs an arm's server holds (by index: its CUDA_VISIBLE_DEVICES, else all)."""

    def __init__(self, nvml: Any, handles: list[Any], error: str | None = None) -> None:
        self.nvml, self.handles, self.error = nvml, handles, error

    @classmethod
    def open(cls, indices: Sequence[int] | None = None) -> GpuWatch:
        try:
            import pynvml  # nvidia-ml-py: loads libnvidia-ml at nvmlInit, not at import

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            chosen = [i for i in (indices if indices is not None else range(count)) if 0 <= i < count]
            if not chosen:
                return cls(None, [], "not measured: NVML sees no GPU")
            return cls(pynvml, [pynvml.nvmlDeviceGetHandleByIndex(i) for i in chosen])
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: a CPU host
            return cls(None, [], f"not measured: NVML unavailable ({type(exc).__name__}: {exc})"[:160])

    def sample(self, ours: set[int]) -> GpuSample | None:
        if self.nvml is None:
            return None
        nv = self.nvml
        foreign, memory, ratios, reasons = 0, 0.0, [], frozenset[str]()
        try:
            for h in self.handles:
                for proc in nv.nvmlDeviceGetComputeRunningProcesses(h):
                    if proc.pid not in ours:
                        foreign += 1
                        memory += (proc.usedGpuMemory or 0) / 2**20
                clock = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
                top = nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)
                if top:
                    ratios.append(clock / top)
                reasons |= reason_names(nv.nvmlDeviceGetCurrentClocksEventReasons(h))
        except Exception as exc:  # a GPU that fell off the bus mid-run: recorded, the run goes on
            self.error = f"not measured: NVML failed ({type(exc).__name__}: {exc})"[:160]
            self.nvml = None
            return None
        return GpuSample(foreign, memory, min(ratios) if ratios else None, reasons)


def summarise(samples: list[GpuSample]) -> dict[str, Any]:
    """A window's GPU figures as HostLoad fields: the most foreign processes and memory, the lowest clock."""
    if not samples:
        return {}
    ratios = [s.sm_clock_ratio for s in samples if s.sm_clock_ratio is not None]
    return {"gpu_foreign_processes": max(s.foreign_processes for s in samples),
            "gpu_foreign_memory_mib": round(max(s.foreign_memory_mib for s in samples), 1),
            "gpu_sm_clock_ratio": round(min(ratios), 4) if ratios else None,
            "gpu_throttle": sorted(frozenset().union(*(s.reasons for s in samples)))}
