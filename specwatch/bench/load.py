"""Load shapes, by name: how a cell's requests are sent and when its counter window closes.

A shape gets the cell's prompts and a `send` that performs and records one request; it
returns when the window closed (its wall time) and the counters read at that moment.
Closed loops keep `concurrency` requests in flight; the open loop (`OpenLoop`) sends each
request at its planned time, whatever the server's state.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from specwatch.bench.metrics import MetricsSnapshot
from specwatch.bench.prompts import Prompt
from specwatch.records import CellKey
from specwatch.spec import WorkloadSpec


class Send(Protocol):
    """One request, recorded by the cell; `scheduled` is its planned send time (perf_counter), open loop only."""

    def __call__(self, index: int, prompt: Prompt, scheduled: float | None = None) -> Awaitable[None]: ...


@dataclass
class LoadContext:
    concurrency: int
    pool: list[tuple[int, Prompt]]  # calibrated before the window opens; popped from the end
    make: Callable[[int], Awaitable[Prompt]]  # one more prompt, when a timed window outlasts the pool
    send: Send
    snapshot: Callable[[], Awaitable[MetricsSnapshot]]
    # Fan-out (bench/fanout.py): this process is worker `worker` of `workers`, each running the shape
    # on its own share of the streams and the pool; all start at `t0` (perf_counter: CLOCK_MONOTONIC,
    # one clock for every process on the host).
    worker: int = 0
    workers: int = 1
    t0: float = field(default_factory=time.perf_counter)


async def sleep_until(instant: float) -> None:
    """Sleep until `instant` on perf_counter, never less."""
    # A loop's timers may fire up to its clock resolution early (uvloop: 1 ms).
    while (left := instant - time.perf_counter()) > 0:
        await asyncio.sleep(left)


async def start(ctx: LoadContext) -> float:
    """Wait for the cell's shared start instant (no request before it); returns it."""
    await sleep_until(ctx.t0)
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


def _exponential_gap(rng: random.Random, rate: float, burstiness: float) -> float:
    return rng.expovariate(rate)


def _gamma_gap(rng: random.Random, rate: float, burstiness: float) -> float:
    # shape = burstiness, mean 1/rate (vllm bench serve's --burstiness): below 1 burstier than Poisson
    return rng.gammavariate(burstiness, 1.0 / (burstiness * rate))


# Inter-arrival laws: name -> one gap at the given rate. The stdlib's generator, not numpy's: the load
# generator stays light to import (worker processes start it once per cell).
ARRIVALS: dict[str, Callable[[random.Random, float, float], float]] = {
    "poisson": _exponential_gap,
    "gamma": _gamma_gap,
}


def schedule(rates: Sequence[float], arrival: str, burstiness: float, seed: int, stream: str) -> list[float]:
    """Planned send times (seconds after the window opens) of a cell's requests, request i at rates[i].

    The first request leaves at 0; the gaps are drawn from the arrival law, then scaled so the
    planned span is exactly its expectation, sum(1 / rates[1:]). For Poisson arrivals that is the
    process conditioned on its count (uniform order statistics), so the inter-arrival law keeps its
    shape while the asked rate is met exactly: any shortfall in the achieved rate is the client's.
    Seeded by (seed, stream): every arm and round of a cell gets the same schedule.
    """
    rng = random.Random(f"{seed}:{stream}")
    gaps = [ARRIVALS[arrival](rng, rate, burstiness) for rate in rates[1:]]
    scale = sum(1.0 / rate for rate in rates[1:]) / sum(gaps) if gaps else 1.0
    return [0.0, *itertools.accumulate(g * scale for g in gaps)][: len(rates)]


@dataclass(frozen=True)
class OpenLoop:
    """Requests at planned times (`offsets`, seconds after t0), sent whether or not earlier ones finished.

    The whole cell's schedule is fixed before the window opens; worker i of n sends slots
    i, i+n, ... The window closes when the last of this worker's requests ends. With
    `max_concurrency` (vllm bench serve's --max-concurrency) a request that would exceed it
    waits for a slot, and leaves late: the wait is its send lateness (n workers: each holds its
    ceil(cap / n) share).
    """

    offsets: tuple[float, ...]
    max_concurrency: int | None = None
    name = "rate"
    duration_s = None  # the window closes when the last request ended

    async def run(self, ctx: LoadContext) -> LoadOutcome:
        prompts = dict(ctx.pool)
        ctx.pool.clear()
        t0 = ctx.t0  # slot 0 is planned at t0: the sleep below waits for it
        cap = asyncio.Semaphore(-(-self.max_concurrency // ctx.workers) if self.max_concurrency else len(self.offsets))

        async def capped(slot: int, prompt: Prompt, planned: float) -> None:
            async with cap:
                await ctx.send(slot, prompt, planned)

        in_flight: list[asyncio.Future[None]] = []
        for slot in range(ctx.worker, len(self.offsets), ctx.workers):
            planned = t0 + self.offsets[slot]
            await sleep_until(planned)
            in_flight.append(asyncio.ensure_future(capped(slot, prompts.pop(slot), planned)))
        await asyncio.gather(*in_flight)
        wall = time.perf_counter() - t0
        return LoadOutcome(t0, wall, await ctx.snapshot())


def open_loop(workload: WorkloadSpec, key: CellKey) -> OpenLoop:
    """The rate cell's schedule: a constant rate, or a ramp from key.ramp_from to key.rate."""
    assert key.rate is not None  # a rate cell's key always has one
    n = workload.requests_per_cell
    start = key.rate if key.ramp_from is None else key.ramp_from
    # a ramp is linear in the request index, as vllm bench serve's --ramp-up-strategy linear
    rates = [start + (key.rate - start) * i / max(n - 1, 1) for i in range(n)]
    offsets = schedule(rates, workload.arrival, workload.burstiness, workload.seed, key.id)
    return OpenLoop(tuple(offsets), workload.max_concurrency)


def load_shape(workload: WorkloadSpec, key: CellKey) -> LoadShape:
    if key.load == "rate":
        return open_loop(workload, key)
    return TimedClosedLoop(workload.duration_s) if workload.duration_s is not None else ClosedLoop()
