"""One cell: calibrated prompts, a counter window around the load, the gauge, then the gates."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from specwatch.bench.client import Client, Output
from specwatch.bench.gates import Gates, gate
from specwatch.bench.gauge import kv_cache_peak, max_running
from specwatch.bench.load import LoadContext, load_shape
from specwatch.bench.metrics import window
from specwatch.bench.prompts import Prompt, build_prompt, repetition_ratio
from specwatch.records import CellKey, CellResult, RequestSample


async def run_cell(client: Client, key: CellKey, gates: Gates) -> CellResult:
    wl = client.workload
    assert key.concurrency is not None  # closed-loop shapes only, for now
    cell_ns = f"{client.target.namespace}:c{key.concurrency}"

    def make(i: int) -> Awaitable[Prompt]:
        return build_prompt(key.prompt_class, wl.seed, i, cell_ns, key.prompt_tokens, client.tokenize)

    # Prompts are calibrated before the window opens, so /tokenize traffic never lands inside it.
    pool = list(enumerate(await asyncio.gather(*(make(i) for i in range(wl.requests_per_cell)))))
    pool.reverse()
    results: list[tuple[RequestSample, Output]] = []

    async def send(index: int, prompt: Prompt) -> None:
        # Unique per run, arm, block (the namespace), cell and index: joins samples with server logs.
        results.append(await client.stream(index, prompt, wl.max_tokens,
                                           request_id=f"{client.target.namespace}/{key.id}/{index}"))

    before = await client.metrics()
    stop = asyncio.Event()
    sampler = asyncio.create_task(max_running(client, stop, key.concurrency))
    kv = None if wl.kv_poll_s is None else asyncio.create_task(kv_cache_peak(client, stop, wl.kv_poll_s))
    outcome = await load_shape(wl).run(LoadContext(key.concurrency, pool, make, send, client.metrics))
    stop.set()
    peak = await sampler
    kv_peak, kv_polls = (None, 0) if kv is None else await kv

    samples = []
    for sample, output in sorted(results, key=lambda r: r[0].index):
        started = sample.started_s - outcome.t0  # taken on the perf_counter clock; stored relative to the cell start
        if started + (sample.e2e_s or 0.0) > outcome.wall_s:
            continue
        # Repetition is measured on the server's own token ids; text is tokenized after the window closed.
        ids = output if isinstance(output, list) else (await client.token_ids(output) if output else [])
        samples.append(sample.model_copy(update={"started_s": started, "repetition_ratio": repetition_ratio(ids)}))
    cell = CellResult(
        load_mode=key.load,
        concurrency=key.concurrency,
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
    )
    return gate(cell, gates)
