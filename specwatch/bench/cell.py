"""One cell: calibrated prompts, a counter window around the load, the gauge, then the gates."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from specwatch.bench.client import Client
from specwatch.bench.fanout import FanOut, LoadRun, drive, workers_for
from specwatch.bench.gates import Gates, gate
from specwatch.bench.gauge import max_running
from specwatch.bench.load import LoadContext
from specwatch.bench.metrics import window
from specwatch.bench.prompts import Prompt, build_prompt, repetition_ratio
from specwatch.bench.selfcheck import merge
from specwatch.records import CellKey, CellResult


async def run_cell(client: Client, key: CellKey, gates: Gates, fan: FanOut | None = None) -> CellResult:
    """`fan`: the worker processes for cells that need more than one (bench/fanout.py)."""
    wl = client.workload
    assert key.concurrency is not None  # closed-loop shapes only, for now
    cell_ns = f"{client.target.namespace}:c{key.concurrency}"

    def make(i: int) -> Awaitable[Prompt]:
        return build_prompt(key.prompt_class, wl.seed, i, cell_ns, key.prompt_tokens, client.tokenize)

    # Prompts are calibrated before the window opens, so /tokenize traffic never lands inside it.
    pool = list(enumerate(await asyncio.gather(*(make(i) for i in range(wl.requests_per_cell)))))
    pool.reverse()
    workers = workers_for(wl, key.concurrency)

    before = await client.metrics()
    stop = asyncio.Event()
    sampler = asyncio.create_task(max_running(client, stop, key.concurrency))
    run: LoadRun
    if workers == 1:
        run = await drive(client, lambda send: LoadContext(key.concurrency or 0, pool, make, send, client.metrics))
    else:
        assert fan is not None, "a cell of several workers needs the FanOut measure_cells starts"
        run = await fan.run(client, key, cell_ns, pool, workers)
    outcome = run.outcome
    stop.set()
    peak = await sampler

    samples = []
    for sample, output in sorted(run.results, key=lambda r: r[0].index):
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
        requests=samples,
        client=merge(run.checks, wl.client_transport, samples),
    )
    return gate(cell, gates)
