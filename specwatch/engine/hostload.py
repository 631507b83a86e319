"""Interference: what the host did besides the run while a launch was measured, per cell window.

A thread samples the host every SAMPLE_S while a launch's cells run: the host's CPU times (psutil), every
process's CPU time (psutil), the kernel's CPU pressure (/proc/pressure/cpu: psutil has no PSI), and on a
GPU host the arm's GPUs (engine/gpuload.py, NVML). A cell's figures come from the two samples around
its window (`CellResult.opened_at` .. + `wall_s`).

"The run" is this process and every process below it (the flow, the client and its workers, local servers
in their own process groups, ssh to remote ranks) plus the process trees the launch names (a container's
processes, which its engine starts). Everything else is foreign. Foreign CPU is the host's busy time less
the run's, so a neighbour's short-lived children count too, even where no sample saw them by pid.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from specwatch.engine import gpuload
from specwatch.records import CellResult, ForeignProcess, HostLoad
from specwatch.redact import redact_argv
from specwatch.spec import Thresholds

# Often enough that a cell of a few seconds has its own samples, rarely enough to cost the host little
# (one sample of ~200 processes: ~5 ms of CPU).
SAMPLE_S = 0.5
TOP_PROCESSES = 3
PSI_CPU = Path("/proc/pressure/cpu")


@dataclass(frozen=True)
class Sample:
    t: float  # Unix time
    busy_s: float  # the host's non-idle CPU seconds since boot, all cores (steal excluded)
    steal_s: float | None
    pressure_s: float | None  # PSI "some" stall seconds since boot
    # pid -> (name, CPU seconds, the same with its reaped children's): a neighbour's short-lived children are
    # named by their parent (a `make` or `pip` that ran them), the run's own figures use its own time only
    procs: dict[int, tuple[str, float, float]]
    ours: frozenset[int]
    gpu: gpuload.GpuSample | None = None


def descendants(roots: Iterable[int]) -> set[int]:
    """The roots and every process below them that still runs."""
    found: set[int] = set()
    for pid in roots:
        try:
            proc = psutil.Process(pid)
            found.add(pid)
            found.update(c.pid for c in proc.children(recursive=True))
        except psutil.Error:
            continue
    return found


def _pressure_s() -> float | None:
    try:
        for line in PSI_CPU.read_text().splitlines():
            if line.startswith("some "):
                return int(line.rsplit("total=", 1)[1]) / 1e6
    except (OSError, ValueError, IndexError):
        pass
    return None


def take_sample(ours: set[int], gpus: gpuload.GpuWatch | None = None) -> Sample:
    times = psutil.cpu_times()
    steal = getattr(times, "steal", None)
    busy = sum(times) - times.idle - getattr(times, "iowait", 0.0) - (steal or 0.0) - getattr(times, "guest", 0.0) \
        - getattr(times, "guest_nice", 0.0)  # guest time is counted in user time already
    procs: dict[int, tuple[str, float, float]] = {}
    for p in psutil.process_iter(["name", "cpu_times"]):
        ct = p.info["cpu_times"]
        if ct is not None:
            own = ct.user + ct.system
            procs[p.pid] = (p.info["name"] or "?", own, own + ct.children_user + ct.children_system)
    return Sample(time.time(), busy, steal, _pressure_s(), procs, frozenset(ours),
                  gpus.sample(ours) if gpus is not None else None)


def _program(pid: int, name: str) -> str:
    """The program and its first arguments, secrets redacted; its name alone once it has exited."""
    try:
        argv = psutil.Process(pid).cmdline()
    except psutil.Error:
        return name
    return " ".join(redact_argv(argv)[:4])[:120] or name


def window(samples: list[Sample], start: float, end: float, cores: int,
           programs: Mapping[int, str] | None = None) -> HostLoad | None:
    """The load between the last sample at or before `start` and the first at or after `end`."""
    before = [s for s in samples if s.t <= start]
    after = [s for s in samples if s.t >= end]
    if not before or not after:
        return None
    a, b = before[-1], after[0]
    span = b.t - a.t
    if span <= 0:
        return None
    ours = a.ours | b.ours
    ours_s = sum(max(0.0, own - (a.procs[pid][1] if pid in a.procs else 0.0))
                 for pid, (_, own, _) in b.procs.items() if pid in ours)
    foreign_s = max(0.0, (b.busy_s - a.busy_s) - ours_s)
    spent = {pid: total - (a.procs[pid][2] if pid in a.procs else 0.0)
             for pid, (_, _, total) in b.procs.items() if pid not in ours}
    # one program run as several processes (make -j, a pip build's compilers, N busy loops) is one neighbour:
    # summed, and named by its busiest pid
    named = programs or {}
    by_program: dict[str, list[tuple[float, int]]] = {}
    for pid, s in spent.items():
        if s > 0:
            by_program.setdefault(named.get(pid) or _program(pid, b.procs[pid][0]), []).append((s, pid))
    busiest = sorted(((sum(s for s, _ in runs), name, max(runs)[1], len(runs)) for name, runs in by_program.items()),
                     reverse=True)
    top = [ForeignProcess(pid=pid, name=name, cores=round(s / span, 3), processes=n)
           for s, name, pid, n in busiest[:TOP_PROCESSES] if s / span >= 0.01]
    capacity = span * cores
    steal = None if a.steal_s is None or b.steal_s is None else (b.steal_s - a.steal_s) / capacity
    pressure = None if a.pressure_s is None or b.pressure_s is None else (b.pressure_s - a.pressure_s) / span
    gpu = gpuload.summarise([s.gpu for s in samples if a.t <= s.t <= b.t and s.gpu is not None])
    return HostLoad(window_s=round(span, 3), foreign_cpu=round(min(1.0, foreign_s / capacity), 4),
                    steal=None if steal is None else round(max(0.0, steal), 4),
                    cpu_pressure=None if pressure is None else round(min(1.0, max(0.0, pressure)), 4),
                    top=top, **gpu)


@dataclass
class HostSampler:
    """Samples the host in a thread while entered. `extra_roots`: process trees of the run that are not below
    this process (a container's), asked for at each sample since they may start after the sampler."""

    extra_roots: Callable[[], Iterable[int]] = lambda: ()
    gpus: gpuload.GpuWatch | None = None
    interval_s: float = SAMPLE_S
    samples: list[Sample] = field(default_factory=list)
    # The command line of each foreign process seen busy, read while it runs: a neighbour that has exited by
    # the time a cell's window is summed up is still named by its program, not only by its process name.
    programs: dict[int, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def ours(self) -> set[int]:
        return descendants([os.getpid(), *self.extra_roots()])

    def sample(self) -> None:
        now = take_sample(self.ours(), self.gpus)
        if self.samples:
            last = self.samples[-1].procs
            for pid, (name, _, cpu) in now.procs.items():
                if pid not in now.ours and pid not in self.programs and cpu - last.get(pid, (name, 0.0, 0.0))[2] > 0.01:
                    self.programs[pid] = _program(pid, name)
        self.samples.append(now)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> HostSampler:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="specwatch-hostload", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()  # the last cell's window closes before this one

    def load(self, opened_at: float | None, wall_s: float) -> HostLoad | None:
        if opened_at is None:
            return None
        load = window(self.samples, opened_at, opened_at + wall_s, psutil.cpu_count() or 1, self.programs)
        if load is not None and self.gpus is not None and self.gpus.error:
            load = load.model_copy(update={"gpu_error": self.gpus.error})
        return load


def contamination(load: HostLoad | None, thresholds: Thresholds) -> str | None:
    """Why the host was too busy for the cell to count, or None (also when nothing was sampled)."""
    if load is None:
        return None
    why = []
    if load.foreign_cpu > thresholds.host_foreign_cpu:
        who = f" (busiest: {_who(load.top[0])})" if load.top else ""
        why.append(f"other processes used {load.foreign_cpu:.0%} of the host's CPU > host_foreign_cpu "
                   f"{thresholds.host_foreign_cpu:.0%}{who}")
    if load.steal is not None and load.steal > thresholds.host_steal:
        why.append(f"the hypervisor stole {load.steal:.0%} of the CPU > host_steal {thresholds.host_steal:.0%}")
    if load.gpu_foreign_processes:
        why.append(f"{load.gpu_foreign_processes} other process(es) computed on the arm's GPU "
                   f"({load.gpu_foreign_memory_mib or 0:.0f} MiB)")
    return "host busy: " + "; ".join(why) if why else None


def _who(p: ForeignProcess) -> str:
    return f"pid {p.pid} '{p.name}'{_more(p)} {p.cores:.2f} cores"


def _more(p: ForeignProcess) -> str:
    return f" (+{p.processes - 1} more of it)" if p.processes > 1 else ""


def busy_line(cells: list[CellResult]) -> str:
    """What kept the host busy over a launch's cells, in one line: the foreign process seen busiest in the
    most contaminated cells, e.g. `pid 4121 'python3 -m pip' used 0.93 cores in 5 of 6 cells`."""
    hit = [c for c in cells if c.contaminated]
    seen: dict[int, list[ForeignProcess]] = {}
    for c in hit:
        if c.host is not None and c.host.top:
            seen.setdefault(c.host.top[0].pid, []).append(c.host.top[0])
    if not seen:
        return f"{len(hit)} of {len(cells)} cells contaminated ({hit[0].contaminated if hit else 'no reason'})"
    pid, procs = max(seen.items(), key=lambda kv: len(kv[1]))
    cores = sum(p.cores for p in procs) / len(procs)
    return (f"pid {pid} '{procs[-1].name}'{_more(procs[-1])} used {cores:.2f} cores in {len(procs)} of "
            f"{len(cells)} cells")


def gpu_watch(platform: str, env: Mapping[str, str]) -> gpuload.GpuWatch | None:
    """The arm's GPUs to watch (its CUDA_VISIBLE_DEVICES, else all); None on a CPU platform."""
    if platform == "cpu":
        return None
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    indices = [int(i) for i in visible.split(",")] if visible and all(
        i.strip().isdigit() for i in visible.split(",")) else None
    return gpuload.GpuWatch.open(indices)
