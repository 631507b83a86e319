"""A cell as `vllm bench serve --save-result` writes it, pinned to vLLM 0.26.0's keys and units.

One cell is one vLLM benchmark run (one concurrency level or rate); several cells are written
one JSON object per line, which is the file `vllm bench serve --append-result` builds over a
sweep. Written as vLLM writes without `--save-detailed` and with
`--percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99`. Times are ms in the
`*_ms` keys and seconds in `duration`, as vLLM has them (checked against the 0.26.0 wheel's
`vllm/benchmarks/serve.py`: `main()` and `benchmark()`).

Where specwatch's figures differ from vLLM's own, specwatch's rule wins and is documented in
docs/measurement.md: a p99 over fewer than 100 requests is null; ITL statistics come from the per-request
gap histograms (within 0.5%); `max_output_tokens_per_s` counts chunks per second, as vLLM does,
with each stream's chunks spread evenly over its decode time (specwatch keeps no per-chunk stamps).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from specwatch.records import CellResult, RequestSample, bucket_ms

FORMAT = "vllm-0.26.0"
PERCENTILES = (50, 90, 99)
# vLLM's --backend names for the protocols specwatch speaks.
BACKENDS = {"completions": "openai", "chat": "openai-chat"}


@dataclass(frozen=True)
class ExportContext:
    model: str
    protocol: str
    label: str | None
    date: datetime
    metadata: dict[str, str]


def _stats(values: list[float], cell: CellResult, ours: str) -> dict[str, float | None]:
    """mean/median/std (population, as numpy's) over `values` in ms, and the cell's own `<ours>_pN` percentiles."""
    out: dict[str, float | None] = {
        "mean": statistics.fmean(values) if values else None,
        "median": statistics.median(values) if values else None,
        "std": statistics.pstdev(values) if values else None,
    }
    return {**out, **{f"p{p}": getattr(cell, f"{ours}_p{p}") for p in PERCENTILES}}


def _itl_values(ok: list[RequestSample]) -> list[float]:
    return [bucket_ms(b) for r in ok for b, n in (r.itl_hist or {}).items() for _ in range(n)]


def _peak_chunks_per_s(ok: list[RequestSample]) -> tuple[float, int]:
    """vLLM's max_output_tokens_per_s (chunks landing in each 1 s bin) and the concurrency in that bin."""
    if not ok:
        return 0.0, 0
    t0 = min(r.started_s for r in ok)
    bins = int(math.ceil(max(r.started_s + (r.e2e_s or 0.0) for r in ok) - t0)) + 1
    chunks, active = [0.0] * bins, [0] * bins
    for r in ok:
        first = r.started_s + (r.ttft_s or 0.0) - t0
        step = (r.decode_s or 0.0) / max(r.chunks - 1, 1)
        for i in range(r.chunks):
            if 0 <= (b := int(first + i * step)) < bins:
                chunks[b] += 1
        for b in range(int(r.started_s - t0), min(int(r.started_s + (r.e2e_s or 0.0) - t0), bins - 1) + 1):
            active[b] += 1
    peak = max(range(bins), key=lambda b: chunks[b])
    return chunks[peak], active[peak]


def vllm_0_26_0(cell: CellResult, ctx: ExportContext) -> dict[str, Any]:
    ok = [r for r in cell.requests if r.status == "ok"]
    dur = cell.wall_s
    total_in = sum(r.prompt_tokens for r in ok)
    total_out = cell.completion_tokens
    peak_tok, peak_conc = _peak_chunks_per_s(ok)
    backend = BACKENDS.get(ctx.protocol, ctx.protocol)
    doc: dict[str, Any] = {
        "date": ctx.date.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": backend,
        "backend": backend,
        "label": ctx.label,
        "model_id": ctx.model,
        "tokenizer_id": ctx.model,
        "num_prompts": len(cell.requests),
        **ctx.metadata,
        "request_rate": "inf" if cell.request_rate is None else cell.request_rate,
        "burstiness": cell.burstiness or 1.0,
        "max_concurrency": cell.concurrency if cell.load_mode == "closed" else cell.max_concurrency,
        "duration": dur,
        "completed": len(ok),
        "failed": len(cell.requests) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / dur,
        "request_goodput": None if cell.goodput_requests is None else cell.goodput_requests / dur,
        "output_throughput": total_out / dur,
        "total_token_throughput": (total_in + total_out) / dur,
        "max_output_tokens_per_s": peak_tok,
        "max_concurrent_requests": peak_conc,
        "rtfx": 0.0,
    }
    w = cell.window
    if w.num_draft_tokens:
        doc.update({
            "spec_decode_acceptance_rate": 100.0 * (w.draft_acceptance_rate or 0.0),  # a percentage in vLLM
            "spec_decode_acceptance_length": w.mean_acceptance_length,
            "spec_decode_num_drafts": int(w.num_drafts or 0),
            "spec_decode_draft_tokens": int(w.num_draft_tokens),
            "spec_decode_accepted_tokens": int(w.num_accepted_tokens or 0),
            "spec_decode_per_position_acceptance_rates": w.acceptance_per_position or [],
        })
    ms = {
        "ttft": ([1000.0 * r.ttft_s for r in ok if r.ttft_s is not None], "ttft_ms"),
        "tpot": ([r.tpot_ms for r in ok if r.tpot_ms is not None], "tpot_ms"),
        "itl": (_itl_values(ok), "itl_ms"),
        "e2el": ([1000.0 * r.e2e_s for r in ok if r.e2e_s is not None], "e2e_ms"),
    }
    for name, (values, ours) in ms.items():
        for stat, value in _stats(values, cell, ours).items():
            doc[f"{stat}_{name}_ms"] = value
    return doc


EXPORT_FORMATS: dict[str, Callable[[CellResult, ExportContext], dict[str, Any]]] = {FORMAT: vllm_0_26_0}


def export_cells(cells: list[tuple[CellResult, ExportContext]], fmt: str = FORMAT) -> str:
    """One JSON object per cell, one per line (a single cell is exactly a --save-result file)."""
    convert = EXPORT_FORMATS[fmt]
    return "".join(json.dumps(convert(cell, ctx)) + "\n" for cell, ctx in cells)
