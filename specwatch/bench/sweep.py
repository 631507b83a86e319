"""A context-length sweep over one launch: per depth, one warm-up and then timed single-stream runs,
each a window of /metrics of its own (one stream at a time: the window is that run's acceptance).

Depths the server cannot hold (depth + max_tokens > its max_model_len, known only after boot) are
kept as cells with their skip reason and no requests. A `SweepRunner` is a `CellRunner`
(bench/runner.py), so a launch runs through engine/arm.py exactly as an A/B launch does.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

from specwatch.analysis.loops import LOOP_FLAG, before_eos, is_loop
from specwatch.bench.client import BenchTarget, Client
from specwatch.bench.gates import Gates, gate
from specwatch.bench.metrics import window
from specwatch.bench.prompts import SOURCES, PromptRequest, judged_output, repetition_ratio
from specwatch.bench.runner import CellCallback
from specwatch.bench.transports import run_on_loop
from specwatch.records import CellKey, CellResult, RequestSample, SpecWindow
from specwatch.spec import SamplingSpec, SweepSpec, WorkloadSpec

log = logging.getLogger("specwatch.bench")


def depth_workload(workload: WorkloadSpec, sweep: SweepSpec, depth: int) -> WorkloadSpec:
    """The workload of one depth: single stream, `runs` requests, one warm-up, the sweep's prompts."""
    return workload.model_copy(update={"prompt_tokens": depth, "prompt_classes": [sweep.prompt_class],
                                       "concurrency": [1], "request_rates": [], "ramp_up": None,
                                       "requests_per_cell": sweep.runs, "warmup_requests": 1, "corpus": None,
                                       "duration_s": None})


def _skipped(wl: WorkloadSpec, sweep: SweepSpec, depth: int, reason: str) -> CellResult:
    return CellResult(concurrency=1, prompt_class=sweep.prompt_class, prompt_tokens=depth, depth=depth,
                      max_tokens=wl.max_tokens, wall_s=0.0, window=SpecWindow(), requests=[], skip_reason=reason)


async def measure_depth(client: Client, sweep: SweepSpec, depth: int, gates: Gates) -> CellResult:
    """One depth: a discarded warm-up, then `runs` timed requests, each in its own counter window."""
    wl = depth_workload(client.workload, sweep, depth)
    source = SOURCES[sweep.prompt_class]
    ns = f"{client.target.namespace}:d{depth}"
    warm = await source.prompt(PromptRequest(wl.seed, -1, f"{ns}:warmup", depth, wl.nonce), client.count)
    sample, _ = await client.stream(-1, warm, wl.max_tokens)
    if sample.status != "ok":
        return _skipped(wl, sweep, depth, f"warm-up at depth {depth} failed: {sample.error}")
    samples: list[RequestSample] = []
    first = last = None
    t0 = time.perf_counter()
    for i in range(sweep.runs):
        # calibration and the prompt's own repetition are measured before the run's window opens
        prompt = await source.prompt(PromptRequest(wl.seed, i, ns, depth, wl.nonce), client.count)
        prompt_rep = repetition_ratio(await client.token_ids(prompt.text))
        before = await client.metrics()
        sample, output = await client.stream(i, prompt, wl.max_tokens)
        after = await client.metrics()
        first, last = first or before, after
        w = window(before, after)
        ids = output if isinstance(output, list) else (await client.token_ids(output) if output else [])
        judged = judged_output(ids, client.target.eos_token_ids)
        # the phrase detector reads the same output the ratio does: the ids before the first EOS
        text = output if isinstance(output, str) else " ".join(map(str, before_eos(ids, client.target.eos_token_ids)))
        samples.append(sample.model_copy(update={
            "started_s": sample.started_s - t0, **judged, "prompt_repetition_ratio": prompt_rep,
            "loop_detected": is_loop(judged["repetition_ratio"], text, sweep.loop_threshold)
            if sample.status == "ok" else None,
            "window_drafts": w.num_drafts, "window_accepted_tokens": w.num_accepted_tokens,
            "window_accepted_per_position": w.accepted_per_position,
        }))
    assert first is not None and last is not None  # runs >= 1
    cell = gate(CellResult(concurrency=1, prompt_class=sweep.prompt_class, prompt_tokens=depth, depth=depth,
                           max_tokens=wl.max_tokens, wall_s=time.perf_counter() - t0, window=window(first, last),
                           requests=samples, prefix_cache_gate=wl.nonce), gates)
    looped = sum(bool(r.loop_detected) for r in samples)
    if looped:
        cell = cell.model_copy(update={"flags": [*cell.flags, f"{LOOP_FLAG} ({looped} of {len(samples)} runs)"]})
    return cell


async def measure_sweep(target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec, gates: Gates,
                        sweep: SweepSpec, on_cell: CellCallback | None = None) -> list[CellResult]:
    """Every depth of the sweep on one server, smallest first; those beyond its max_model_len are skipped."""
    async with Client(target, workload, sampling) as client:
        served = await client.max_model_len()
        depths = sweep.depths_for(served, workload.max_tokens) if served is not None else list(sweep.depths or [])
        cells = []
        for depth in depths:
            if served is not None and depth + workload.max_tokens > served:
                reason = (f"depth {depth} + max_tokens {workload.max_tokens} = {depth + workload.max_tokens} is "
                          f"beyond the server's max_model_len {served}")
                cells.append(_skipped(depth_workload(workload, sweep, depth), sweep, depth, reason))
            else:
                cells.append(await measure_depth(client, sweep, depth, gates))
            c = cells[-1]
            if on_cell:
                on_cell(c)
            mal = c.window.mean_acceptance_length
            log.info("depth %d: %s", depth, c.skip_reason or
                     f"decode {c.decode_tok_s_median or 0:.1f} tok/s, mean acceptance length "
                     f"{'n/a' if mal is None else f'{mal:.2f}'}, loop {c.loop_detected}")
        return cells


@dataclass(frozen=True)
class SweepRunner:
    """Measures a launch's sweep depths in this process (a CellRunner; the flow isolates it, tasks/arms.py)."""

    sweep: SweepSpec
    on_cell: CellCallback | None = None

    def measure(self, target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec,
                gates: Gates) -> list[CellResult]:
        return run_on_loop(workload.client_transport,
                           measure_sweep(target, workload, sampling, gates, self.sweep, self.on_cell))

    def streaming(self, on_cell: CellCallback) -> SweepRunner:
        return replace(self, on_cell=on_cell)

    def pending(self, workload: WorkloadSpec, done: list[CellResult]) -> CellKey:
        """The depth after `done`: depths run smallest first, the default ones doubling from min_depth."""
        n = len(done)
        depth = self.sweep.depths[min(n, len(self.sweep.depths) - 1)] if self.sweep.depths else \
            self.sweep.min_depth * 2 ** n
        return CellKey(concurrency=1, prompt_class=self.sweep.prompt_class, prompt_tokens=depth)
