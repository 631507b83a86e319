"""Imported before `specwatch bench` runs (see real_server.py): records what each cell sent and measured.

For every measured request (not warm-ups) it appends one JSON line to $SPECWATCH_CAPTURE:
{"c": concurrency, "index": i, "decode_tok_s": ..., "ttft_s": ..., "tokens": ...} once its cell ended, and the
raw /metrics text right before and after each cell ({"c": ..., "metrics_before"/"metrics_after": text}).
The requests are read from the cell the parent process returns, so a cell whose streams ran in fan-out
worker processes (spawned: they never import this module) is recorded like one that ran in-process. The prompts
themselves come from `specwatch bench --dataset-out` (the product's export), which real_server.py hands to
`vllm bench serve`, so the two tools are compared on identical requests.
Benchmark-only: nothing here changes how specwatch times or counts.
"""

from __future__ import annotations

import json
import os

from specwatch.bench import gauge, runner

_OUT = open(os.environ["SPECWATCH_CAPTURE"], "a", buffering=1)  # noqa: SIM115 (lives as long as the process)

_orig_run_cell = runner.run_cell


async def _metrics_text(client) -> str:  # type: ignore[no-untyped-def]
    resp = await client.http.get("/metrics")
    return resp.text


async def _run_cell(bench_client, key, *args, **kwargs):  # type: ignore[no-untyped-def]
    # The server's own histograms (decode time, TTFT) over the cell, read outside the cell's window:
    # before its prompts are built (no generation then) and after it returned.
    c = key.concurrency
    _OUT.write(json.dumps({"c": c, "metrics_before": await _metrics_text(bench_client)}) + "\n")
    try:
        cell = await _orig_run_cell(bench_client, key, *args, **kwargs)
    finally:
        _OUT.write(json.dumps({"c": c, "metrics_after": await _metrics_text(bench_client)}) + "\n")
    for r in cell.requests:
        _OUT.write(json.dumps({"c": c, "index": r.index, "decode_tok_s": r.decode_tok_s, "ttft_s": r.ttft_s,
                               "tokens": r.completion_tokens, "status": r.status}) + "\n")
    return cell


runner.run_cell = _run_cell


# SPECWATCH_NAMESPACE pins the nonce namespace, so a second `specwatch bench` run sends byte-identical
# prompts (only sensible with the server's prefix caching off, as real_server.py runs it).
if os.environ.get("SPECWATCH_NAMESPACE"):
    import dataclasses

    _orig_prepare, _orig_measure = runner.prepare, runner.measure_cells

    def _pinned(target):  # type: ignore[no-untyped-def]
        return dataclasses.replace(target, namespace=os.environ["SPECWATCH_NAMESPACE"])

    async def _prepare(target, *args, **kwargs):  # type: ignore[no-untyped-def]
        return await _orig_prepare(_pinned(target), *args, **kwargs)

    async def _measure(target, *args, **kwargs):  # type: ignore[no-untyped-def]
        return await _orig_measure(_pinned(target), *args, **kwargs)

    runner.prepare, runner.measure_cells = _prepare, _measure


# SPECWATCH_GAUGE_PERIOD_S overrides how often the client polls /metrics for the running-requests gauge
# while a cell runs (specwatch.bench.gauge.GAUGE_PERIOD_S, 0.2 s): real_server.py --gauge-period-s shows its cost.
if os.environ.get("SPECWATCH_GAUGE_PERIOD_S"):
    gauge.GAUGE_PERIOD_S = float(os.environ["SPECWATCH_GAUGE_PERIOD_S"])
