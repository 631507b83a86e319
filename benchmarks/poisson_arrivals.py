"""Poisson arrivals: does an open-loop cell send at the asked rate? 10k requests at a high rate.

One rate cell (`workload.request_rates`), run by specwatch's own runner (this process pinned to
core 0) against a fast fake_vllm pinned to core 1 (2 ms steps, a few output tokens, so the server
never holds the client back). Prints:

- the asked rate, the schedule's planned rate and the achieved rate ((sent - 1) / send span);
  the target is achieved within 2% of asked (vllm bench serve sent 183.5 of 200 asked QPS before
  its fix, vllm issue #21104);
- the inter-arrival fit: a Kolmogorov-Smirnov test of the planned and the actual send gaps
  against the exponential of the asked rate (gamma of shape `--burstiness` with `--arrival gamma`),
  and the gaps' coefficient of variation (1 for Poisson, 1/sqrt(burstiness) for gamma);
- send lateness (actual - planned send time) percentiles.

Prompts are calibrated with the fake server's tokenizer in-process (same counts, no round trips).

    .venv/bin/python benchmarks/poisson_arrivals.py [--rate 200] [--requests 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

from specwatch.bench.client import BenchTarget, Client  # noqa: E402
from specwatch.bench.gates import Gates  # noqa: E402
from specwatch.bench.prompts import Conversation, as_text  # noqa: E402
from specwatch.bench.runner import measure_cells, prepare  # noqa: E402
from specwatch.spec import SamplingSpec, WorkloadSpec  # noqa: E402
from specwatch_testing import fake_vllm as fake_server  # noqa: E402


async def _local_count(self: Client, messages: Conversation) -> int:
    # The fake server's own tokenizer, in-process: the same counts without ~8 /tokenize round trips per
    # prompt (10k prompts take ~15 min on a loaded 2-core host). Calibration is not what this measures.
    return len(fake_server.tokenize(as_text(messages), fake_server.Settings.vocab_size))


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=200.0, help="asked requests per second")
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--arrival", choices=["poisson", "gamma"], default="poisson")
    ap.add_argument("--burstiness", type=float, default=1.0)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet-wait-s", type=float, default=0, help="wait this long for a quiet machine first")
    return ap.parse_args()


def main() -> None:
    args = parse()
    C.pin_self(C.CLIENT_CORE)
    Client.count = _local_count  # type: ignore[method-assign]
    wl = WorkloadSpec(prompt_classes=["code"], prompt_tokens=16, max_tokens=args.max_tokens, concurrency=[],
                      request_rates=[args.rate], arrival=args.arrival, burstiness=args.burstiness,
                      requests_per_cell=args.requests, warmup_requests=2, seed=args.seed, read_timeout_s=60)
    fake = ["--served-model-name", "demo", "--ttft-ms", "1", "--step-ms", "2", "--max-num-seqs", "4096"]
    with C.fake_vllm(fake) as url:
        target = BenchTarget(url, "demo", f"poisson:{time.time_ns()}")
        print(C.wait_until_quiet(args.quiet_wait_s) if args.quiet_wait_s else "# quiet-machine wait off", flush=True)
        asyncio.run(prepare(target, wl, SamplingSpec()))
        t = time.perf_counter()
        (cell,) = asyncio.run(measure_cells(target, wl, SamplingSpec(), Gates()))
        total_s = time.perf_counter() - t
    reqs = sorted(cell.requests, key=lambda r: r.index)
    planned = np.array([r.scheduled_s for r in reqs], dtype=float)
    sent = np.sort(np.array([r.started_s for r in reqs]))
    late_ms = np.array([r.send_lateness_s for r in reqs], dtype=float) * 1e3
    law = ("expon", (0, 1 / args.rate)) if args.arrival == "poisson" else \
        ("gamma", (args.burstiness, 0, 1 / (args.rate * args.burstiness)))
    achieved = cell.achieved_rate or 0.0
    print(f"# {len(reqs)} requests, {args.arrival} arrivals (burstiness {args.burstiness:g}), {args.max_tokens} output "
          f"tokens each, fake_vllm on core {C.SERVER_CORE}, client on core {C.CLIENT_CORE}; cell incl. prompt "
          f"calibration {total_s:.0f} s, window {cell.wall_s:.1f} s; {cell.requests_failed} failed; "
          f"{'REJECTED: ' + (cell.reject_reason or '') if cell.rejected else 'accepted'}")
    print("| asked req/s | planned req/s | achieved req/s | achieved / asked |")
    print("|---|---|---|---|")
    print(f"| {args.rate:g} | {(len(planned) - 1) / (planned[-1] - planned[0]):.2f} | {achieved:.2f} | "
          f"{achieved / args.rate:.4f} ({'within' if abs(achieved / args.rate - 1) <= 0.02 else 'OUTSIDE'} 2%) |")
    print()
    print(f"| gaps | mean ms | CV | KS D vs {law[0]} at the asked rate | KS p |")
    print("|---|---|---|---|---|")
    for name, gaps in (("planned", np.diff(planned)), ("sent", np.diff(sent))):
        ks = stats.kstest(gaps, law[0], args=law[1])
        print(f"| {name} | {gaps.mean() * 1e3:.3f} | {gaps.std() / gaps.mean():.3f} | {ks.statistic:.4f} | "
              f"{ks.pvalue:.3f} |")
    print()
    q = np.percentile(late_ms, [50, 90, 99, 99.9])
    print("| send lateness ms | p50 | p90 | p99 | p99.9 | max |")
    print("|---|---|---|---|---|---|")
    print(f"| | {q[0]:.3f} | {q[1]:.3f} | {q[2]:.3f} | {q[3]:.3f} | {late_ms.max():.3f} |")
    print(f"\n# server-side: ttft p50 {statistics.median(r.ttft_s or 0 for r in reqs) * 1e3:.2f} ms, "
          f"e2e p50 {statistics.median(r.e2e_s or 0 for r in reqs) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
