"""Imported before `specwatch bench` runs (see real_server.py): records what each cell sent and measured.

For every measured request (not warm-ups) it appends one JSON line to $SPECWATCH_CAPTURE:
{"c": concurrency, "index": i, "prompt": text} before the request starts (outside its timed span), and
{"c": ..., "index": ..., "decode_tok_s": ..., "ttft_s": ..., "tokens": ...} after it ends. real_server.py
then gives `vllm bench serve` the very same prompts, so the two tools are compared on identical requests.
Benchmark-only: nothing here changes how specwatch times or counts.
"""

from __future__ import annotations

import contextvars
import json
import os

from tasks import bench

_CONCURRENCY: contextvars.ContextVar[int | None] = contextvars.ContextVar("capture_concurrency", default=None)
_OUT = open(os.environ["SPECWATCH_CAPTURE"], "a", buffering=1)  # noqa: SIM115 (lives as long as the process)

_orig_run_cell = bench._run_cell
_orig_stream = bench.Client.stream_completion


async def _run_cell(client, concurrency, *args, **kwargs):  # type: ignore[no-untyped-def]
    token = _CONCURRENCY.set(concurrency)
    try:
        return await _orig_run_cell(client, concurrency, *args, **kwargs)
    finally:
        _CONCURRENCY.reset(token)


async def _stream_completion(self, index, prompt, max_tokens):  # type: ignore[no-untyped-def]
    c = _CONCURRENCY.get()
    if c is not None:
        _OUT.write(json.dumps({"c": c, "index": index, "prompt": prompt.text}) + "\n")
    sample, output = await _orig_stream(self, index, prompt, max_tokens)
    if c is not None:
        _OUT.write(json.dumps({"c": c, "index": index, "decode_tok_s": sample.decode_tok_s, "ttft_s": sample.ttft_s,
                               "tokens": sample.completion_tokens, "status": sample.status}) + "\n")
    return sample, output


bench._run_cell = _run_cell
bench.Client.stream_completion = _stream_completion
