"""The client checks itself: how late was it, while it timed a cell?

Each client process (one per worker, bench/fanout.py) runs a `SelfCheck` on its own event
loop for the cell's window and hands back a `WorkerCheck` (plain data); `merge` folds the
workers' checks into the cell's `ClientCheck`, and `saturation` says which figures crossed the
`thresholds.client_*` limits, i.e. when the cell's timings describe the client, not the server.

- loop lag: a sleeper asks for LAG_PERIOD_S and records how much later it woke. A loop busy
  with other callbacks, or a process the kernel did not run, both show here.
- stamp delay: see `_StampProbe`.
- CPU share: the process's CPU time (all threads) over the window's wall time. Near 1.0 the
  client is the bottleneck even when the kernel gave it a whole core.
- send lateness (open loop): a request sent after its planned time, from the samples.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

from specwatch.records import ClientCheck, RequestSample, _quantile

LAG_PERIOD_S = 0.01
PROBE_PERIOD_S = 0.02
_STAMP = struct.Struct("d")


@dataclass
class WorkerCheck:
    """One client process's raw self-check samples over a cell's window (seconds)."""

    loop_lag_s: list[float] = field(default_factory=list)
    stamp_delay_s: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    wall_s: float = 0.0

    @property
    def cpu_share(self) -> float | None:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else None


class _StampProbe:
    """The time from a byte becoming readable on a socket of this loop to a coroutine stamping it.

    What exactly: a thread of this process writes its `perf_counter()` into one end of a
    socketpair every PROBE_PERIOD_S (the byte is readable the moment `send` returns: a local
    socket has no wire); a coroutine on the client's loop reads the other end through an
    asyncio stream, the same readiness -> protocol callback -> task wake-up path every SSE read
    of every transport takes, and records `perf_counter()` at the read minus the written stamp.
    It does not contain the transport's own parsing per read (httpcore/aiohttp internals give no
    hook for that); that cost shows in the CPU share. Under CPU starvation the writing thread is
    held up too, so this is a floor there; loop lag catches starvation.
    """

    def __init__(self, delays: list[float]) -> None:
        self.delays = delays
        self._stop = threading.Event()
        self._ours, self._theirs = socket.socketpair()
        self._thread = threading.Thread(target=self._write, name="specwatch-stamp-probe", daemon=True)

    def _write(self) -> None:
        with contextlib.suppress(OSError):
            while not self._stop.wait(PROBE_PERIOD_S):
                self._theirs.send(_STAMP.pack(time.perf_counter()))

    async def run(self) -> None:
        reader, writer = await asyncio.open_connection(sock=self._ours)
        self._thread.start()
        try:
            while True:
                data = await reader.readexactly(_STAMP.size)
                self.delays.append(time.perf_counter() - _STAMP.unpack(data)[0])
        finally:
            self._stop.set()
            self._thread.join()
            self._theirs.close()
            writer.close()


class SelfCheck:
    """`async with SelfCheck() as check:` around a cell's load; `check.result` afterwards."""

    def __init__(self) -> None:
        self.result = WorkerCheck()
        self._tasks: list[asyncio.Task[None]] = []
        self._cpu0 = self._t0 = 0.0

    async def _sleeper(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(LAG_PERIOD_S)
            self.result.loop_lag_s.append(max(0.0, time.perf_counter() - t - LAG_PERIOD_S))

    async def __aenter__(self) -> SelfCheck:
        self._cpu0, self._t0 = time.process_time(), time.perf_counter()
        self._tasks = [asyncio.create_task(self._sleeper()),
                       asyncio.create_task(_StampProbe(self.result.stamp_delay_s).run())]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.result.cpu_s = time.process_time() - self._cpu0
        self.result.wall_s = time.perf_counter() - self._t0
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _ms(values: list[float], q: float) -> float | None:
    v = _quantile(values, q)
    return None if v is None else v * 1e3


def merge(checks: list[WorkerCheck], transport: str, samples: list[RequestSample]) -> ClientCheck:
    """The cell's check: quantiles over all workers' samples together, the busiest worker's CPU."""
    lag = [v for c in checks for v in c.loop_lag_s]
    stamp = [v for c in checks for v in c.stamp_delay_s]
    shares = [s for c in checks if (s := c.cpu_share) is not None]
    # Open loop's samples carry their planned send time (send_lateness_s); closed-loop ones do not.
    late = [v for r in samples if (v := getattr(r, "send_lateness_s", None)) is not None]
    return ClientCheck(
        workers=len(checks), transport=transport,
        loop_lag_ms_p50=_ms(lag, 0.5), loop_lag_ms_p99=_ms(lag, 0.99),
        loop_lag_ms_max=max(lag) * 1e3 if lag else None, stamp_delay_ms_p99=_ms(stamp, 0.99),
        cpu_share_max=max(shares) if shares else None, send_lateness_ms_p99=_ms(late, 0.99),
    )


def saturation(check: ClientCheck, loop_lag_ms: float, cpu_share: float, send_lateness_ms: float) -> list[str]:
    """The figures that say the client, not the server, set the cell's timings (empty: it kept up).

    The stamp delay is reported, not gated: its probe writes every 20 ms, so over a short cell its
    p99 is nearly its maximum, and one hiccup rejected a cell that was within 0.4% of truth
    (benchmarks/README.md, section 2); the sleeper's 10 ms samples carry the same signal.
    """
    limits = [
        ("loop lag p99", check.loop_lag_ms_p99, loop_lag_ms, "ms", "client_loop_lag_ms"),
        ("CPU share", check.cpu_share_max, cpu_share, "", "client_cpu_share"),
        ("send lateness p99", check.send_lateness_ms_p99, send_lateness_ms, "ms", "client_send_lateness_ms"),
    ]
    return [f"{name} {value:.{1 if unit else 2}f}{unit} > {limit:g}{unit} (thresholds.{option})"
            for name, value, limit, unit, option in limits if value is not None and value > limit]
