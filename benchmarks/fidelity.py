"""Fidelity: does the specwatch client measure what the server really did?

Against `specwatch_testing.fake_vllm` (known step time, multi-token chunks from a known acceptance
process, server-side truth at GET /truth), at several concurrencies, print measured vs true:

- decode tok/s per stream: median over requests of (completion_tokens - 1) / (t_last - t_first),
  client clock vs the server's own first/last-token times (paired per request via x-request-id);
- TTFT: the client's (request sent -> first chunk read) vs the server's (request handed to the
  engine -> first token produced); the difference is HTTP/stack overhead, reported in ms;
- mean acceptance length (and drafts / accepted / per-position): the client's /metrics window vs
  the server's /truth totals over the same cell; must be exact.

Server pinned to core 1 (taskset), client to core 0 (sched_setaffinity). Target: decode and TTFT
within 1%, acceptance exact.

    .venv/bin/python benchmarks/fidelity.py [--concurrency 1,4,16,64] [--requests N] [--transport NAME]

Up to the client's capacity (benchmarks/README.md, section 2): `--concurrency 1,4,16,64,128`
(at 10 ms steps ~100 chunks/s per stream, so c=128 is ~12 800 chunks/s on the client's one core).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

from specwatch.records import CellResult  # noqa: E402


def parse() -> argparse.Namespace:
    ap = C.cell_parser(__doc__, concurrency="1,4,16,64", requests=0,
                       requests_help="requests per cell (default max(16, 2*c))")
    ap.add_argument("--step-ms", type=float, default=10.0, help="fake server decode step time")
    ap.add_argument("--ttft-ms", type=float, default=100.0, help="fake server time to first token")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--accept-probs", default="0.8,0.6,0.45,0.3,0.2", help="marginal per-position acceptance")
    ap.add_argument("--target", type=float, default=0.01, help="relative error target for decode and TTFT")
    ap.add_argument("--raw-requests", type=int, default=16,
                    help="raw-socket TTFT floor probe: about this many requests per concurrency (waves of c)")
    ap.add_argument("--transport", default=None, help="specwatch client transport (default: specwatch's default)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin server/client to cores 1/0")
    ap.add_argument("--quiet-wait-s", type=float, default=900, help="wait this long for a quiet machine")
    return ap.parse_args()


async def _raw_wave(url: str, bodies: list[tuple[str, bytes]]) -> list[tuple[str, float]]:
    """TTFT seen by a minimal client: raw asyncio sockets, connections opened beforehand, no HTTP
    library, no JSON parsing; all requests of the wave written at once. Returns (request id, TTFT)."""
    host, port = url.removeprefix("http://").split(":")
    conns = [await asyncio.open_connection(host, int(port)) for _ in bodies]

    async def one(conn, rid: str, body: bytes) -> tuple[str, float]:  # type: ignore[no-untyped-def]
        reader, writer = conn
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nx-request-id: {rid}\r\nConnection: close\r\n\r\n").encode()
        t0 = time.perf_counter()
        writer.write(head + body)
        buf = b""
        while b"data:" not in buf:
            chunk = await reader.read(65536)
            if not chunk:
                raise RuntimeError(f"raw probe: connection closed before the first token: {buf[:300]!r}")
            buf += chunk
        ttft = time.perf_counter() - t0
        while await reader.read(65536):
            pass
        writer.close()
        return rid, ttft

    return await asyncio.gather(*(one(conn, rid, body) for conn, (rid, body) in zip(conns, bodies, strict=True)))


def raw_floor(url: str, a: argparse.Namespace, c: int, waves: int) -> list[tuple[float, float]]:
    """(raw client TTFT, server TTFT) pairs: `waves` waves of c simultaneous requests.

    The overhead a client with no HTTP library still sees (server HTTP stack, kernel, and at
    c > 1 the server's one-core queue of request parsing), the floor for any Python client.
    """
    import json

    from specwatch.bench.prompts import Prompt, seeded_content, user
    from specwatch.bench.protocols import Completions
    from specwatch.spec import SamplingSpec

    C.reset_truth(url)
    out = []
    for w in range(waves):
        bodies = []
        for i in range(c):
            text = f"unique request raw{time.time_ns()}x{i} " + seeded_content(a.prompt_class, 0, i,
                                                                              a.prompt_tokens * 4)
            payload = Completions().body("demo", Prompt(user(text), 0, ""), a.max_tokens, SamplingSpec())
            bodies.append((f"raw-c{c}-{w}-{i}", json.dumps(payload).encode()))
        got = asyncio.run(_raw_wave(url, bodies))
        recs = {r["request_id"]: r for r in C.truth(url)["records"]}
        out += [(ttft, recs[f"cmpl-{rid}"]["ttft_s"]) for rid, ttft in got]
    return out


def main() -> int:
    a = parse()
    C.processes.install_signal_handlers()  # SIGTERM unwinds like Ctrl-C, so servers are still stopped
    concurrency = [int(c) for c in a.concurrency.split(",")]
    note = C.wait_until_quiet(a.quiet_wait_s)
    spec = f'{{"method":"ngram","num_speculative_tokens":{a.k},"prompt_lookup_max":4,"prompt_lookup_min":2}}'
    server_args = ["--served-model-name", "demo", "--spec-config", spec, "--accept-probs", a.accept_probs,
                   "--step-ms", str(a.step_ms), "--ttft-ms", str(a.ttft_ms), "--max-num-seqs", "256"]
    server_cores = None if a.no_pin else (C.SERVER_CORE,)
    if not a.no_pin:
        C.pin_self(C.CLIENT_CORE)
    rows: list[dict] = []
    notes: list[str] = []
    namespace = f"fidelity-{time.time_ns()}"
    with C.CoreSampler() as cpu, C.fake_vllm(server_args, cores=server_cores, sampler=cpu) as url:
        cpu.watch("client", os.getpid())
        for i, c in enumerate(concurrency):
            def cell(c: int = c, i: int = i) -> C.SpecwatchCell:
                return C.specwatch_cell(url, concurrency=c, requests=a.requests or max(16, 2 * c),
                                        prompt_class=a.prompt_class, prompt_tokens=a.prompt_tokens,
                                        max_tokens=a.max_tokens, warmup=2 if i == 0 else 0, tag=f"c{c}",
                                        namespace=f"{namespace}-{time.time_ns()}",  # fresh nonces on a retry
                                        transport=a.transport, workers=1)  # one process: requests carry ids

            got, quiet = C.quiet_run(f"cell c={c}", cell, a.quiet_wait_s)
            if quiet != "quiet":
                notes.append(f"c={c}: {quiet}")
            util = cpu.utilisation(got.t_start, got.t_end)
            util["client_proc"] = cpu.process_cpu("client", got.t_start, got.t_end)
            util["server_proc"] = cpu.process_cpu("server", got.t_start, got.t_end)
            rows.append(analyse(c, got.cell, got.truth, got.lag_s, util))
        floors: dict[int, list[tuple[float, float]]] = {}
        for c in concurrency:
            waves = max(1, a.raw_requests // c)
            floors[c], quiet = C.quiet_run(f"raw floor c={c}", lambda c=c, w=waves: raw_floor(url, a, c, w),
                                           a.quiet_wait_s)
            if quiet != "quiet":
                notes.append(f"raw floor c={c}: {quiet}")
    note = "; ".join([note, *notes])

    report(a, rows, note, floors)
    return 0


def analyse(c: int, cell: CellResult, tr: dict, lag: list[float], util: dict[int, float]) -> dict:
    recs = {r["request_id"].removeprefix(f"cmpl-c{c}-"): r for r in tr["records"]
            if r["request_id"].startswith(f"cmpl-c{c}-")}
    ok = [s for s in cell.requests if s.status == "ok"]
    pairs = [(s, recs[str(s.index)]) for s in ok if str(s.index) in recs]
    true_dec = C.median([r["decode_tok_s"] for _, r in pairs])
    true_ttft = C.median([r["ttft_s"] for _, r in pairs])
    paired_dec = [C.rel(s.decode_tok_s, r["decode_tok_s"]) for s, r in pairs]
    overhead = [s.ttft_s - r["ttft_s"] for s, r in pairs if s.ttft_s is not None and r["ttft_s"] is not None]
    w, t = cell.window, tr["totals"]
    acc_exact = (w.num_drafts == t["drafts"] and w.num_accepted_tokens == t["accepted"]
                 and w.num_draft_tokens == t["draft_tokens"]
                 and [int(x) for x in (w.accepted_per_position or [])] == t["accepted_per_pos"]
                 and w.mean_acceptance_length == t["mean_acceptance_length"])
    steps = sum(r["steps"] + 1 for r in tr["records"])  # one SSE chunk per engine step (+ the first token)
    lag_sorted = sorted(lag)
    return {
        "c": c, "n": len(cell.requests), "paired": len(pairs), "rejected": cell.reject_reason,
        "true_dec": true_dec, "dec": cell.decode_tok_s_median, "dec_err": C.rel(cell.decode_tok_s_median, true_dec),
        "dec_pair_med": C.median([abs(x) for x in paired_dec if x is not None]),
        "dec_pair_max": max((abs(x) for x in paired_dec if x is not None), default=None),
        "true_ttft": true_ttft, "ttft": cell.ttft_s_median, "ttft_err": C.rel(cell.ttft_s_median, true_ttft),
        "overhead_med": C.median(overhead), "overhead_max": max(overhead, default=None),
        "w": w, "t": t, "acc_exact": acc_exact,
        "agg": cell.aggregate_tok_s, "server_agg": cell.server_aggregate_tok_s,
        "chunks_s": steps / cell.wall_s, "wall": cell.wall_s,
        "lag_p50": statistics.median(lag) if lag else None,
        "lag_p99": lag_sorted[int(0.99 * (len(lag) - 1))] if lag else None,
        "lag_max": lag_sorted[-1] if lag else None,
        "cpu_client": util.get(C.CLIENT_CORE), "cpu_server": util.get(C.SERVER_CORE),
        "proc_client": util.get("client_proc"), "proc_server": util.get("server_proc"),
    }


def report(a: argparse.Namespace, rows: list[dict], note: str, floors: dict[int, list[tuple[float, float]]]) -> None:
    per_cell = ", ".join(f"c{r['c']}:{r['n']}" for r in rows)
    tps = 1 + sum(float(x) for x in a.accept_probs.split(",")[: a.k])
    print()
    print("=" * 100)
    print("FIDELITY: specwatch client vs fake_vllm server-side truth")
    print(f"  server: fake_vllm step {a.step_ms} ms, TTFT {a.ttft_ms} ms, ngram k={a.k}, marginal acceptance "
          f"{a.accept_probs} (expected mean acceptance length {tps:.3f}, ~{tps / a.step_ms * 1000:.0f} tok/s/stream)")
    print(f"  workload: {a.prompt_class} prompts {a.prompt_tokens} tok, max_tokens {a.max_tokens} (ignore_eos), "
          f"requests/cell {per_cell}; greedy")
    print(f"  pinning: {'none' if a.no_pin else f'server core {C.SERVER_CORE}, client core {C.CLIENT_CORE}'}; {note}")
    print()
    print("Decode tok/s per stream (median over requests; truth = server first/last-token times, same formula)")
    print(C.table(
        ["c", "true", "measured", "rel err", "paired |err| med", "paired |err| max", f"within {a.target:.0%}"],
        [[r["c"], C.num(r["true_dec"], ".2f"), C.num(r["dec"], ".2f"), C.pct(r["dec_err"], 3),
          C.pct(r["dec_pair_med"], 3), C.pct(r["dec_pair_max"], 3),
          "yes" if r["dec_err"] is not None and abs(r["dec_err"]) <= a.target else "NO"] for r in rows]))
    print()
    print("TTFT (median over requests). server = engine first token - request arrival at the engine;")
    print("client = first chunk read - request start; overhead = client - server, paired per request;")
    print("floor = the same overhead for a raw-socket client (no HTTP library, connections pre-opened, waves of c")
    print("simultaneous requests): what any client would see from this server's HTTP stack; excess = overhead - floor")
    body = []
    for r in rows:
        fl = floors.get(r["c"], [])
        floor_med = C.median([cl - sv for cl, sv in fl])
        raw_ttft = C.median([cl for cl, _ in fl])
        r["floor_med"], r["raw_ttft"] = floor_med, raw_ttft
        body.append([r["c"], C.num(r["true_ttft"] * 1e3, ".2f"), C.num(r["ttft"] * 1e3, ".2f"), C.pct(r["ttft_err"], 2),
                     "yes" if r["ttft_err"] is not None and abs(r["ttft_err"]) <= a.target else "NO",
                     C.num(r["overhead_med"] * 1e3, ".2f"), C.num(r["overhead_max"] * 1e3, ".2f"),
                     C.num(floor_med * 1e3 if floor_med is not None else None, ".2f"),
                     C.num((r["overhead_med"] - floor_med) * 1e3 if floor_med is not None else None, ".2f"),
                     C.num(raw_ttft * 1e3 if raw_ttft is not None else None, ".2f"),
                     C.pct(C.rel(r["ttft"], raw_ttft), 2)])
    print(C.table(["c", "server ms", "client ms", "err vs server", f"within {a.target:.0%}", "overhead med ms",
                   "overhead max ms", "floor med ms", "excess ms", "raw-socket TTFT ms", "err vs raw"], body))
    print()
    print("Acceptance: client /metrics window vs server /truth totals (same cell)")
    print(C.table(
        ["c", "drafts w/t", "accepted w/t", "mean acc len (client)", "mean acc len (truth)", "per-pos (client)",
         "exact"],
        [[r["c"], f"{r['w'].num_drafts:.0f}/{r['t']['drafts']}",
          f"{r['w'].num_accepted_tokens:.0f}/{r['t']['accepted']}",
          f"{r['w'].mean_acceptance_length:.6f}", f"{r['t']['mean_acceptance_length']:.6f}",
          " ".join(f"{p:.3f}" for p in r["w"].acceptance_per_position or []), "yes" if r["acc_exact"] else "NO"]
         for r in rows]))
    print()
    print("Load and client health: busy share of each core and CPU used by the client / server process over the")
    print("cell (1 core = 100%); event-loop lag = how late a 10 ms sleeper in the client's loop wakes up")

    def share(x: float | None) -> str:
        return "-" if x is None else f"{x:.0%}"

    print(C.table(
        ["c", "chunks/s", "core0", "client proc", "core1", "server proc", "loop lag p50 ms", "p99 ms", "max ms",
         "agg tok/s (usage)", "agg tok/s (server ctr)", "cell gate"],
        [[r["c"], C.num(r["chunks_s"], ".0f"), share(r["cpu_client"]), share(r["proc_client"]),
          share(r["cpu_server"]), share(r["proc_server"]),
          C.num(r["lag_p50"] * 1e3 if r["lag_p50"] is not None else None, ".2f"),
          C.num(r["lag_p99"] * 1e3 if r["lag_p99"] is not None else None, ".2f"),
          C.num(r["lag_max"] * 1e3 if r["lag_max"] is not None else None, ".2f"),
          C.num(r["agg"], ".1f"), C.num(r["server_agg"], ".1f"),
          "accepted" if not r["rejected"] else f"REJECTED: {r['rejected'][:70]}"] for r in rows]))
    print()
    def within(x: float | None) -> bool:
        return x is not None and abs(x) <= a.target

    def at(pred) -> str:  # type: ignore[no-untyped-def]
        cs = [str(r["c"]) for r in rows if pred(r)]
        return "c=" + ",".join(cs) if cs else "none"

    print(f"VERDICT (target {a.target:.0%}):")
    print(f"  decode tok/s within target at {at(lambda r: within(r['dec_err']))}; "
          f"missed at {at(lambda r: not within(r['dec_err']))}")
    print(f"  TTFT vs server-side TTFT within target at {at(lambda r: within(r['ttft_err']))}; "
          f"missed at {at(lambda r: not within(r['ttft_err']))}")
    print(f"  TTFT vs raw-socket client TTFT within target at "
          f"{at(lambda r: within(C.rel(r['ttft'], r.get('raw_ttft'))))}; "
          f"missed at {at(lambda r: not within(C.rel(r['ttft'], r.get('raw_ttft'))))}")
    print(f"  acceptance (drafts, accepted, per-position, mean length) exact: "
          f"{'all cells' if all(r['acc_exact'] for r in rows) else at(lambda r: not r['acc_exact']) + ' NOT exact'}")
    print("=" * 100)


if __name__ == "__main__":
    sys.exit(main())
