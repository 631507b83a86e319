"""A cell's load over several client processes, so that the client is never the bottleneck.

One process holds about one core's worth of SSE reads (benchmarks/client_capacity.py). A cell
that needs more is fanned out: worker i of n runs the cell's load shape on its own event loop
with its own `Client`, on streams i, i+n, ... and on the pool's prompts i, i+n, ...; every
worker stamps on `time.perf_counter()` (CLOCK_MONOTONIC, one clock for all processes of the
host) and starts at the same instant t0. The parent keeps what makes a cell one measurement: it
calibrates the prompts, takes the /metrics snapshots that open and close the counter window and
samples the running gauge, so the window and the gates cover all workers.

Each worker is pinned to its own core of the calling process's affinity (`_work` says why).

Worker count (`workers_for`): `workload.client_workers` when set, else one worker per
STREAMS_PER_WORKER streams of the cell, at most one per usable core. One worker runs in the
calling process: nothing is spawned (tests and small CPU cells stay cheap).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import math
import multiprocessing
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import httpx

from specwatch.bench.client import BenchTarget, Client, Output
from specwatch.bench.corpus import source_for
from specwatch.bench.load import LoadContext, LoadOutcome, LoadShape, Send
from specwatch.bench.metrics import MetricsSnapshot
from specwatch.bench.prompts import Prompt, PromptRequest
from specwatch.bench.selfcheck import SelfCheck, WorkerCheck
from specwatch.bench.transports import run_on_loop, transport_for
from specwatch.records import CellKey, RequestSample
from specwatch.spec import SamplingSpec, WorkloadSpec

# GPU servers stream ~100 chunks/s per stream (10 ms per step): 32 streams are ~3 200 chunks/s,
# a fifth of what one core reads with the default transport, so a worker's loop stays prompt.
STREAMS_PER_WORKER = 32
# From submitting the workers' jobs to t0: a warm worker unpickles its share and opens a loop
# and a client in well under this.
START_MARGIN_S = 0.3

Results = list[tuple[RequestSample, Output]]


def usable_cores() -> int:
    return len(os.sched_getaffinity(0))


def cell_streams(workload: WorkloadSpec, key: CellKey) -> int:
    """The most requests a cell can have in flight: its concurrency; an open loop's cap, else all of its requests."""
    return key.concurrency or workload.max_concurrency or workload.requests_per_cell


def workers_for(workload: WorkloadSpec, streams: int) -> int:
    """How many client processes drive a cell of at most `streams` requests in flight (see the module doc)."""
    if workload.client_workers is not None:
        return min(workload.client_workers, streams)
    return max(1, min(math.ceil(streams / STREAMS_PER_WORKER), usable_cores(), streams))


def prompt_maker(client: Client, key: CellKey, namespace: str) -> Callable[[int], Awaitable[Prompt]]:
    """Prompt i of a cell, calibrated with `client`'s server; the same in the parent and in every worker."""
    wl = client.workload
    source = source_for(wl, key.prompt_class)
    streams = key.concurrency or 1  # side by side (multi-turn waves); an open loop has no fixed number

    def make(i: int) -> Awaitable[Prompt]:
        return source.prompt(PromptRequest(wl.seed, i, namespace, key.prompt_tokens, wl.nonce, streams), client.count)

    return make


def share(items: int, worker: int, workers: int) -> int:
    """Worker `worker`'s share of `items` (streams): i, i+n, ... below items."""
    return len(range(worker, items, workers))


@dataclass
class LoadRun:
    results: Results
    outcome: LoadOutcome
    checks: list[WorkerCheck]


async def drive(client: Client, key: CellKey, shape: LoadShape, ctx_of: Callable[[Send], LoadContext]) -> LoadRun:
    """Run the cell's load shape on this loop under a self-check; `ctx_of(send)` builds its context."""
    results: Results = []

    async def send(index: int, prompt: Prompt, scheduled: float | None = None) -> None:
        # Per round (the namespace), cell and index: joins samples with server logs, and pairs the arms of a round.
        sample, output = await client.stream(index, prompt, prompt.max_tokens or client.workload.max_tokens,
                                             request_id=f"{client.target.namespace}/{key.id}/{index}")
        results.append((sample.model_copy(update={"scheduled_s": scheduled}), output))

    with still_heap():
        async with SelfCheck() as check:
            outcome = await shape.run(ctx_of(send))
    return LoadRun(results, outcome, [check.result])


@contextlib.contextmanager
def still_heap() -> Iterator[None]:
    """No full garbage collection inside a window: collect and freeze what exists before it.

    A cell's calibrated prompts, samples and the client's own objects make a gen-2 collection
    take 100-200 ms; one landing in a window stalls every stream and send at once
    (benchmarks/poisson_arrivals.py: send lateness p99 103 ms at 500 req/s, 2.2 ms with the
    heap frozen). Frozen objects are handed back to the collector when the window closes.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@dataclass(frozen=True)
class WorkerJob:
    """Plain data a worker process needs for its share of one cell."""

    target: BenchTarget
    workload: WorkloadSpec
    sampling: SamplingSpec
    key: CellKey
    shape: LoadShape
    namespace: str  # the cell's nonce namespace: prompts a worker builds itself stay unique
    worker: int
    workers: int
    t0: float
    pool: list[tuple[int, Prompt]]
    core: int  # the worker runs pinned here, one core per worker


async def _empty() -> MetricsSnapshot:
    return MetricsSnapshot()  # the parent closes the counter window, not a worker


async def _run_job(job: WorkerJob) -> LoadRun:
    streams = share(cell_streams(job.workload, job.key), job.worker, job.workers)
    concurrency = share(job.key.concurrency, job.worker, job.workers) if job.key.concurrency else 0  # 0: open loop
    async with Client(job.target, job.workload, job.sampling, streams=streams) as client:
        # A fresh process has no open connections, while the parent's own client calibrated the
        # prompts over its; httpx connecting 16 streams at t0 showed as 20-30 ms of loop lag.
        # An open loop's in-flight count is not known up front: open as many as a closed cell's worker would hold.
        await client.open_connections(concurrency or min(streams, STREAMS_PER_WORKER))
        make = prompt_maker(client, job.key, job.namespace)
        return await drive(client, job.key, job.shape,
                           lambda send: LoadContext(concurrency, list(job.pool), make, send, _empty,
                                                    job.worker, job.workers, job.t0))


def _work(job: WorkerJob) -> LoadRun:
    # Left to the scheduler, two lightly loaded workers can share a core for a whole cell; their
    # streams' chunks arrive in phase, so each then waits for the other's burst (loop lag p99 25 ms
    # at 37% CPU each in benchmarks/client_capacity.py, 7 ms for one worker on one core).
    os.sched_setaffinity(0, {job.core})
    return run_on_loop(job.workload.client_transport, _run_job(job))


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent dies, even by SIGKILL: a client process
    whose flow was killed must not go on loading a server (Linux; elsewhere a no-op).

    Ctrl-C in a terminal reaches the whole foreground group: the parent handles it and kills this
    process, which must not print a KeyboardInterrupt traceback of its own meanwhile.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _ready(transport: str) -> int:
    """Import what a job will use (aiohttp, uvloop: a few hundred ms), so the first cell starts on time."""
    die_with_parent()
    t = transport_for(transport)
    t.loop().close()
    t.make(httpx.Limits())
    return os.getpid()


class FanOut:
    """A pool of `workers` client processes, started once and kept for every cell of a benchmark."""

    def __init__(self, workers: int, transport: str) -> None:
        self.workers = workers
        self.cores = sorted(os.sched_getaffinity(0))
        # spawn: a fork of a process with a running event loop (or Prefect's threads) is not safe
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
        # Every submit without an idle process starts one: `workers` jobs start all of them now,
        # so a cell's t0 never waits for interpreter start-up and imports.
        for future in [self._pool.submit(_ready, transport) for _ in range(workers)]:
            future.result()

    def __enter__(self) -> FanOut:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(cancel_futures=True)

    async def run(self, parent: Client, key: CellKey, shape: LoadShape, namespace: str,
                  pool: list[tuple[int, Prompt]], workers: int) -> LoadRun:
        """The cell's load over `workers` processes; the counter window closes as the shape says.

        Every worker gets the parent's `shape` (an open loop's whole schedule): drawn once, the same for all.
        """
        assert workers <= self.workers
        wl = parent.workload
        t0 = time.perf_counter() + START_MARGIN_S
        jobs = [WorkerJob(parent.target, wl, parent.sampling, key, shape, namespace, w, workers, t0,
                          [(i, p) for i, p in pool if i % workers == w], self.cores[w % len(self.cores)])
                for w in range(workers)]
        loop = asyncio.get_running_loop()
        runs = asyncio.gather(*(loop.run_in_executor(self._pool, _work, job) for job in jobs))
        duration = shape.duration_s
        if duration is None:
            done = await runs
            wall = max(r.outcome.t0 + r.outcome.wall_s for r in done) - t0
            after = await parent.metrics()
        else:
            await asyncio.sleep(max(0.0, t0 + duration - time.perf_counter()))
            after = await parent.metrics()
            done = await runs
            wall = duration
        return LoadRun([r for run in done for r in run.results], LoadOutcome(t0, wall, after),
                       [c for run in done for c in run.checks])
