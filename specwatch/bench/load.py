"""Load shapes, by name: how a cell's requests are sent and when its counter window closes.

A shape gets the cell's prompts and a `send` that performs and records one request; it
returns when the window closed (its wall time) and the counters read at that moment.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from specwatch.bench.metrics import MetricsSnapshot
from specwatch.bench.prompts import Prompt
from specwatch.spec import WorkloadSpec


@dataclass
class LoadContext:
    concurrency: int
    pool: list[tuple[int, Prompt]]  # calibrated before the window opens; popped from the end
    make: Callable[[int], Awaitable[Prompt]]  # one more prompt, when a timed window outlasts the pool
    send: Callable[[int, Prompt], Awaitable[None]]  # one request, recorded by the cell
    snapshot: Callable[[], Awaitable[MetricsSnapshot]]
    # Fan-out (bench/fanout.py): this process is worker `worker` of `workers`, each running the shape
    # on its own share of the streams and the pool; all start at `t0` (perf_counter: CLOCK_MONOTONIC,
    # one clock for every process on the host).
    worker: int = 0
    workers: int = 1
    t0: float = field(default_factory=time.perf_counter)


async def start(ctx: LoadContext) -> float:
    """Wait for the cell's shared start instant; returns it."""
    # A loop's timers may fire up to its clock resolution early (uvloop: 1 ms): no request before t0.
    while (left := ctx.t0 - time.perf_counter()) > 0:
        await asyncio.sleep(left)
    return ctx.t0


@dataclass(frozen=True)
class LoadOutcome:
    t0: float  # perf_counter at the window's start
    wall_s: float
    after: MetricsSnapshot


class LoadShape(Protocol):
    name: str
    @property
    def duration_s(self) -> float | None:
        """The window closes this long after t0; None: when the last request ended.

        A fanned-out cell's parent closes the counter window itself, so it must know which.
        """
        ...

    async def run(self, ctx: LoadContext) -> LoadOutcome: ...


class ClosedLoop:
    """`concurrency` workers send the pool's requests back to back; the window closes when the last ends."""

    name = "closed"
    duration_s: float | None = None

    async def run(self, ctx: LoadContext) -> LoadOutcome:
        async def worker() -> None:
            while ctx.pool:
                await ctx.send(*ctx.pool.pop())

        t0 = await start(ctx)
        await asyncio.gather(*(worker() for _ in range(ctx.concurrency)))
        wall = time.perf_counter() - t0
        return LoadOutcome(t0, wall, await ctx.snapshot())


@dataclass(frozen=True)
class TimedClosedLoop:
    """Closed loop for `duration_s`: only requests that started and finished inside it count.

    The counter window closes at the deadline; requests still running finish outside it.
    """

    duration_s: float
    name = "duration"

    async def run(self, ctx: LoadContext) -> LoadOutcome:
        # Workers hold every workers-th index of the pool (bench/fanout.py): more prompts keep to that
        # stride, so indexes never collide across workers.
        next_index = max((i for i, _ in ctx.pool), default=ctx.worker - ctx.workers) + ctx.workers
        deadline = math.inf

        async def worker() -> None:
            nonlocal next_index
            while time.perf_counter() < deadline:
                if ctx.pool:
                    index, prompt = ctx.pool.pop()
                else:
                    index, next_index = next_index, next_index + ctx.workers
                    prompt = await ctx.make(index)  # the pre-built pool ran dry: a longer window than expected
                await ctx.send(index, prompt)

        t0 = await start(ctx)
        deadline = t0 + self.duration_s
        workers = asyncio.gather(*(worker() for _ in range(ctx.concurrency)))
        await asyncio.sleep(max(0.0, deadline - time.perf_counter()))
        after = await ctx.snapshot()
        await workers
        return LoadOutcome(t0, self.duration_s, after)


def load_shape(workload: WorkloadSpec) -> LoadShape:
    return TimedClosedLoop(workload.duration_s) if workload.duration_s is not None else ClosedLoop()
