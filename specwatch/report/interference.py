"""The report's interference lines: what the host did besides the run over its cells, and the launches run
again because of it (engine/hostload.py, engine/experiment.py)."""

from __future__ import annotations

from specwatch.records import CellResult, ForeignProcess, RunResult
from specwatch.spec import Thresholds


def _range(values: list[float]) -> str:
    ordered = sorted(values)
    return f"median {ordered[len(ordered) // 2]:.0%}, max {ordered[-1]:.0%}"


def _busiest(cells: list[CellResult]) -> list[tuple[ForeignProcess, int]]:
    """Each foreign process seen among the top ones, at its busiest, with the number of cells it was seen in."""
    seen: dict[int, tuple[ForeignProcess, int]] = {}
    for c in cells:
        for p in c.host.top if c.host else []:
            best, n = seen.get(p.pid, (p, 0))
            seen[p.pid] = (p if p.cores > best.cores else best, n + 1)
    return sorted(seen.values(), key=lambda pn: -pn[0].cores)


def interference_lines(result: RunResult, thresholds: Thresholds) -> list[str]:
    """Bullet lines for the report's Conditions."""
    kept = [c for a in result.arms for c in a.cells]
    redone = [c for r in result.redos for c in r.launch.cells]
    sampled = [c for c in kept + redone if c.host is not None]
    if not sampled:
        return ["- host load: not sampled"]
    loads = [c.host for c in sampled if c.host is not None]
    cpu = f"- host load over {len(sampled)} cell(s) (thresholds host_foreign_cpu {thresholds.host_foreign_cpu:.0%}, " \
          f"host_steal {thresholds.host_steal:.0%}): other processes used {_range([h.foreign_cpu for h in loads])} " \
          "of the host's CPU"
    steal = [h.steal for h in loads if h.steal is not None]
    pressure = [h.cpu_pressure for h in loads if h.cpu_pressure is not None]
    cpu += f"; steal {_range(steal)}" if steal else "; steal not reported"
    cpu += f"; CPU pressure (PSI some) {_range(pressure)}" if pressure else "; CPU pressure not reported"
    lines = [cpu]
    gpu = [h for h in loads if h.gpu_foreign_processes is not None]
    if gpu:
        ratios = [h.gpu_sm_clock_ratio for h in gpu if h.gpu_sm_clock_ratio is not None]
        throttle = sorted({r for h in gpu for r in h.gpu_throttle})
        clock = f"SM clock / max lowest {min(ratios):.2f}" if ratios else "SM clock not read"
        lines.append(f"- GPU: foreign compute processes in {sum(1 for h in gpu if h.gpu_foreign_processes)} of "
                     f"{len(gpu)} cell(s) (most memory {max(h.gpu_foreign_memory_mib or 0 for h in gpu):.0f} MiB); "
                     f"{clock}; clock event reasons {', '.join(throttle) or 'none'}")
    elif errors := sorted({h.gpu_error for h in loads if h.gpu_error}):
        lines.append(f"- GPU interference {'; '.join(errors)}")
    if busiest := _busiest(sampled):
        lines.append("- busiest other processes: " + "; ".join(
            f"pid {p.pid} `{p.name}`" + (f" (+{p.processes - 1} more of it)" if p.processes > 1 else "")
            + f" up to {p.cores:.2f} cores ({n} cell(s))" for p, n in busiest[:3]))
    hit = [c for c in kept if c.contaminated]
    lines.append(f"- contaminated cells kept: {len(hit)}" if hit else "- no kept cell was contaminated")
    for r in result.redos:
        lines.append(f"- contaminated launch, not read: `{r.arm}` round {r.round}: {r.reason}")
    return lines
