"""One cell: calibrated prompts, a counter window around the load, the gauge, then the gates."""

from __future__ import annotations

import asyncio
import time

from specwatch.bench.client import Client
from specwatch.bench.corpus import source_for
from specwatch.bench.fanout import FanOut, LoadRun, cell_streams, drive, prompt_maker, workers_for
from specwatch.bench.gates import Gates, gate
from specwatch.bench.gauge import kv_cache_peak, max_running
from specwatch.bench.load import LoadContext, load_shape
from specwatch.bench.metrics import window
from specwatch.bench.prompts import Prompt, judged_output, nonce
from specwatch.bench.selfcheck import merge
from specwatch.export.peer_dataset import write_cell_dataset
from specwatch.records import CellKey, CellResult, SpecWindow
from specwatch.spec import WorkloadSpec

# Prompts calibrated at once before a cell (each a bisection of /tokenize calls): enough to keep a
# server's tokenizer busy, few enough that no server sees a burst of connections.
CALIBRATION_CONCURRENCY = 32
# A GPU server compiles kernels (Triton, ptxas) the first time it runs a batch shape, also after
# boot: on an H200 the first c=64 cell of a launch ran at 60% of the same cell a minute later, the
# server's own TPOT as slow as the client's (benchmarks/README.md, section 7). The launch's
# warm-up requests run one at a time; a wave at the cell's concurrency, just before its window,
# runs the cell's batch shapes once. Short requests: only the shapes matter.
WAVE_TOKENS = 16


def _fronted(prompt: Prompt, tag: str) -> Prompt:
    """The prompt behind another unique front: it shares no prefix-cache block with the cell's own."""
    first, *rest = prompt.messages
    return Prompt(({**first, "content": f"{tag} {first['content']}"}, *rest), prompt.tokens, None)


async def warm_wave(client: Client, key: CellKey, prompts: list[Prompt]) -> None:
    """`key.concurrency` discarded requests side by side (the cell's prompts, fronted anew)."""
    tag = nonce(client.target.namespace, "wave", key.id)
    wave = [_fronted(p, f"{tag}-{i}") for i, p in enumerate(prompts[: key.concurrency])]
    # Failures are not judged here: the cell that follows meets the same server and records them.
    await asyncio.gather(*(client.stream(-1 - i, p, WAVE_TOKENS) for i, p in enumerate(wave)))


async def run_cell(client: Client, key: CellKey, gates: Gates, fan: FanOut | None = None) -> CellResult:
    """`fan`: the worker processes for cells that need more than one (bench/fanout.py)."""
    wl = client.workload
    cell_ns = f"{client.target.namespace}:" + (f"c{key.concurrency}" if key.load == "closed" else key.id)
    source = source_for(wl, key.prompt_class)
    make = prompt_maker(client, key, cell_ns)

    # Prompts are calibrated before the window opens, so /tokenize traffic never lands inside it;
    # a bounded number at a time: a 10k-request rate cell would otherwise open 10k connections at once.
    calibrating = asyncio.Semaphore(CALIBRATION_CONCURRENCY)

    async def calibrated(i: int) -> Prompt:
        async with calibrating:
            return await make(i)

    prompts = await asyncio.gather(*(calibrated(i) for i in range(wl.cell_requests(key.concurrency))))
    if client.target.dataset_dir is not None:
        write_cell_dataset(client.target.dataset_dir, key, prompts, wl.max_tokens)
    pool = list(enumerate(prompts))
    pool.reverse()
    workers = workers_for(wl, cell_streams(wl, key))

    shape = load_shape(wl, key)  # an open loop's schedule is drawn here, before the window opens
    if wl.warmup_wave and key.concurrency:
        await warm_wave(client, key, prompts)
    before = await client.metrics()
    opened_at = time.time()  # wall clock, which the host-load sampler of another process shares
    stop = asyncio.Event()
    # Open loop has no concurrency to reach, so the gauge (which costs the server) is not polled.
    sampler = asyncio.create_task(max_running(client, stop, key.concurrency)) if key.concurrency else None
    kv = None if wl.kv_poll_s is None else asyncio.create_task(kv_cache_peak(client, stop, wl.kv_poll_s))
    run: LoadRun
    if workers == 1:
        run = await drive(client, key, shape,
                          lambda send: LoadContext(key.concurrency or 0, pool, make, send, client.metrics))
    else:
        assert fan is not None, "a cell of several workers needs the FanOut measure_cells starts"
        run = await fan.run(client, key, shape, cell_ns, pool, workers)
    outcome = run.outcome
    stop.set()
    peak = await sampler if sampler else None
    kv_peak, kv_polls = (None, 0) if kv is None else await kv

    samples = []
    for sample, output in sorted(run.results, key=lambda r: r[0].index):
        started = sample.started_s - outcome.t0  # taken on the perf_counter clock; stored relative to the cell start
        if started + (sample.e2e_s or 0.0) > outcome.wall_s:
            continue
        # Repetition is measured on the server's own token ids; text is tokenized after the window closed.
        ids = output if isinstance(output, list) else (await client.token_ids(output) if output else [])
        scheduled = None if sample.scheduled_s is None else sample.scheduled_s - outcome.t0
        samples.append(sample.model_copy(update={"started_s": started, "scheduled_s": scheduled,
                                                 **judged_output(ids, client.target.eos_token_ids)}))
    rate_cell = key.load == "rate"
    cell = CellResult(
        load_mode=key.load,
        concurrency=key.concurrency,
        request_rate=key.rate,
        ramp_from_rate=key.ramp_from,
        arrival=wl.arrival if rate_cell else None,
        burstiness=wl.burstiness if rate_cell else None,
        max_concurrency=wl.max_concurrency if rate_cell else None,
        prompt_class=key.prompt_class,
        prompt_tokens=key.prompt_tokens,
        max_tokens=wl.max_tokens,
        wall_s=outcome.wall_s,
        window=window(before, outcome.after),
        max_running_observed=peak,
        kv_cache_usage_peak=kv_peak,
        kv_cache_polls=kv_polls,
        slo=wl.slo,
        requests=samples,
        prefix_cache_gate=wl.nonce and not source.reuses_prefixes,
        client=merge(run.checks, wl.client_transport, samples),
        counters_error=before.error or outcome.after.error,
        opened_at=opened_at,
    )
    return gate(cell, gates)


def aborted_cell(key: CellKey, wl: WorkloadSpec, reason: str) -> CellResult:
    """A cell that never finished (its server died or hung): kept as a rejected record with its reason."""
    return CellResult(load_mode=key.load, concurrency=key.concurrency, request_rate=key.rate,
                      ramp_from_rate=key.ramp_from, prompt_class=key.prompt_class, prompt_tokens=key.prompt_tokens,
                      max_tokens=wl.max_tokens, wall_s=0.0, window=SpecWindow(), requests=[], rejected=True,
                      reject_reason=reason, counters_error="the cell never finished")
