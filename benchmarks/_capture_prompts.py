"""Imported before `specwatch bench` runs (see real_server.py): records what each cell sent and measured.

For every measured request (not warm-ups) it appends one JSON line to $SPECWATCH_CAPTURE:
{"c": concurrency, "index": i, "decode_tok_s": ..., "ttft_s": ..., "tokens": ...} after it ends, and the raw
/metrics text right before and after each cell ({"c": ..., "metrics_before"/"metrics_after": text}). The prompts
themselves come from `specwatch bench --dataset-out` (the product's export), which real_server.py hands to
`vllm bench serve`, so the two tools are compared on identical requests.
Benchmark-only: nothing here changes how specwatch times or counts.
"""

from __future__ import annotations

import contextvars
import json
import os

from specwatch.bench import client, gauge, runner

_CONCURRENCY: contextvars.ContextVar[int | None] = contextvars.ContextVar("capture_concurrency", default=None)
_OUT = open(os.environ["SPECWATCH_CAPTURE"], "a", buffering=1)  # noqa: SIM115 (lives as long as the process)

_orig_run_cell = runner.run_cell
_orig_stream = client.Client.stream


async def _metrics_text(client) -> str:  # type: ignore[no-untyped-def]
    resp = await client.http.get("/metrics")
    return resp.text


async def _run_cell(bench_client, key, *args, **kwargs):  # type: ignore[no-untyped-def]
    # The server's own histograms (decode time, TTFT) over the cell, read outside the cell's window:
    # before its prompts are built (no generation then) and after it returned.
    concurrency = key.concurrency
    _OUT.write(json.dumps({"c": concurrency, "metrics_before": await _metrics_text(bench_client)}) + "\n")
    token = _CONCURRENCY.set(concurrency)
    try:
        return await _orig_run_cell(bench_client, key, *args, **kwargs)
    finally:
        _CONCURRENCY.reset(token)
        _OUT.write(json.dumps({"c": concurrency, "metrics_after": await _metrics_text(bench_client)}) + "\n")


async def _stream(self, index, prompt, max_tokens, **kwargs):  # type: ignore[no-untyped-def]
    c = _CONCURRENCY.get()
    sample, output = await _orig_stream(self, index, prompt, max_tokens, **kwargs)
    if c is not None:
        _OUT.write(json.dumps({"c": c, "index": index, "decode_tok_s": sample.decode_tok_s, "ttft_s": sample.ttft_s,
                               "tokens": sample.completion_tokens, "status": sample.status}) + "\n")
    return sample, output


runner.run_cell = _run_cell
client.Client.stream = _stream


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
