"""The nonce-fronted benchmark: an httpx async streaming client that knows only an
OpenAI-compatible base URL plus vLLM's /tokenize and /metrics, never how the server started.

Per request it times TTFT and decode from the stream but counts tokens from `usage`
(under speculation one SSE chunk carries several tokens). Per cell it snapshots
/metrics right before and after, samples the running-request gauge while the cell runs,
and applies the gates that make a cell trustworthy or rejected.
"""

from __future__ import annotations

import asyncio
import json
import math
import multiprocessing
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import httpx
from prefect import task

from specwatch.metrics import MetricsSnapshot, parse_metrics, running_requests, window
from specwatch.prompts import Prompt, build_prompt, repetition_ratio
from specwatch.records import ARRIVAL_GAP_S, MAX_COALESCED_SHARE, MIN_GROUP_SHARE, CellResult, RequestSample
from specwatch.spec import SamplingSpec, WorkloadSpec

log = logging.getLogger("specwatch.bench")

GAUGE_PERIOD_S = 0.2
MIN_GAUGE_SAMPLES = 3


class BenchError(Exception):
    """The endpoint cannot be benchmarked at all (down, not OpenAI-compatible)."""


@dataclass(frozen=True)
class BenchTarget:
    base_url: str
    model: str
    # Makes nonces unique to this invocation (run, arm, block); content stays seeded.
    namespace: str


CellCallback = Callable[[CellResult], None]


def _timeout(workload: WorkloadSpec) -> httpx.Timeout:
    return httpx.Timeout(
        connect=workload.connect_timeout_s, read=workload.read_timeout_s, write=30.0, pool=workload.read_timeout_s
    )


def _payload(model: str, prompt: str, max_tokens: int, sampling: SamplingSpec, stream: bool) -> dict:
    body: dict = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
        "stream": stream,
    }
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if stream:
        body["stream_options"] = {"include_usage": True}
        # vLLM then sends each chunk's token ids: byte-fragment tokens can arrive with empty text.
        body["return_token_ids"] = True
    return body


class Client:
    """One httpx.AsyncClient per benchmark; every endpoint call specwatch makes goes through here."""

    def __init__(self, target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec) -> None:
        self.target = target
        self.workload = workload
        self.sampling = sampling
        limit = max(workload.concurrency) + 4
        self.http = httpx.AsyncClient(
            base_url=target.base_url,
            timeout=_timeout(workload),
            limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit),
        )

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def tokenize(self, text: str) -> int:
        return len(await self.token_ids(text))

    async def token_ids(self, text: str) -> list[int]:
        resp = await self.http.post("/tokenize", json={"model": self.target.model, "prompt": text})
        resp.raise_for_status()
        body = resp.json()
        return body.get("tokens") or [0] * int(body["count"])

    async def metrics(self) -> MetricsSnapshot:
        resp = await self.http.get("/metrics")
        resp.raise_for_status()
        return parse_metrics(resp.text)

    async def running(self) -> float | None:
        resp = await self.http.get("/metrics")
        resp.raise_for_status()
        return running_requests(resp.text)

    async def check_ready(self) -> None:
        try:
            resp = await self.http.get("/v1/models")
            resp.raise_for_status()
        except httpx.HTTPError as exc:
            raise BenchError(f"endpoint {self.target.base_url} is not answering /v1/models: {exc!r}") from None
        served = [m.get("id") for m in resp.json().get("data", [])]
        if self.target.model not in served:
            raise BenchError(f"model {self.target.model!r} is not served at {self.target.base_url}; it serves {served}")

    async def stream_completion(
        self, index: int, prompt: Prompt, max_tokens: int
    ) -> tuple[RequestSample, list[int] | str]:
        """One streamed request; returns its sample and output (token ids when the server sends them, else text).

        Never raises for request failures: they are samples with a status.
        """
        payload = _payload(self.target.model, prompt.text, max_tokens, self.sampling, stream=True)
        t0 = time.perf_counter()
        t_first: float | None = None
        t_last: float | None = None
        chunks = 0
        usage: dict | None = None
        parts: list[str] = []
        ids: list[int] = []
        gaps: list[float] = []

        def sample(status: str, error: str | None = None) -> RequestSample:
            now = time.perf_counter()
            return RequestSample(
                index=index,
                prompt_tokens=prompt.tokens,
                status=status,
                error=error,
                completion_tokens=(usage or {}).get("completion_tokens"),
                chunks=chunks,
                started_s=t0,
                ttft_s=None if t_first is None else t_first - t0,
                e2e_s=now - t0,
                decode_s=None if t_first is None or t_last is None else t_last - t_first,
                arrival_groups=None if t_first is None else 1 + sum(g > ARRIVAL_GAP_S for g in gaps),
            )

        try:
            async with self.http.stream("POST", "/v1/completions", json=payload) as resp:
                if resp.status_code != 200:
                    body = (await resp.aread()).decode(errors="replace")[:200]
                    return sample("error", f"HTTP {resp.status_code}: {body}"), ""
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    event = json.loads(data)
                    if event.get("usage"):
                        usage = event["usage"]
                    for choice in event.get("choices") or []:
                        if choice.get("text") or choice.get("token_ids"):
                            now = time.perf_counter()
                            if t_last is not None:
                                gaps.append(now - t_last)
                            t_last = now
                            t_first = t_first or now
                            chunks += 1
                            parts.append(choice.get("text") or "")
                            ids.extend(choice.get("token_ids") or [])
        except httpx.ReadTimeout:
            return sample("timeout", f"client read timeout: no bytes for {self.workload.read_timeout_s}s "
                                     "(read_timeout_s); a client limit, not a server measurement"), ""
        except httpx.ConnectTimeout:
            return sample("timeout", f"client connect timeout after {self.workload.connect_timeout_s}s"), ""
        except (httpx.HTTPError, json.JSONDecodeError) as exc:
            return sample("error", f"{type(exc).__name__}: {exc}"[:200]), ""
        if usage is None:
            return sample("error", "stream carried no usage; the server must honour stream_options.include_usage"), ""
        if usage.get("completion_tokens") != max_tokens:
            return sample("error", f"completion_tokens {usage.get('completion_tokens')} != max_tokens {max_tokens} "
                                   "(server ignored ignore_eos/min_tokens)"), ""
        return sample("ok"), ids or "".join(parts)


async def _max_running(client: Client, stop: asyncio.Event, concurrency: int) -> int | None:
    """Peak of the server's running-requests gauge while the cell runs.

    Sampled, so a floor; None when the cell was too short for MIN_GAUGE_SAMPLES samples,
    since then a low peak says nothing about whether concurrency was reached. Polling stops
    once the target was seen: every /metrics render costs the server ~5 ms of the core it
    shares with the engine (a ~3% slowdown when polled all cell long on a CPU host).
    """
    peaks: list[float] = []
    while True:
        # Wait first: a poll at the very start would only see requests not yet admitted.
        try:
            await asyncio.wait_for(stop.wait(), GAUGE_PERIOD_S)
            break
        except TimeoutError:
            pass
        try:
            running = await client.running()
        except httpx.HTTPError:
            continue
        if running is not None:
            peaks.append(running)
        if len(peaks) >= MIN_GAUGE_SAMPLES and max(peaks) >= concurrency:
            break
    return int(max(peaks)) if len(peaks) >= MIN_GAUGE_SAMPLES else None


def gate(cell: CellResult, max_prefix_cache_hit_rate: float, repetition_flag_ratio: float) -> CellResult:
    """Reject cells whose numbers cannot be trusted; flag the suspicious ones. Pure, so testable."""
    reasons = []
    if cell.requests_failed:
        first = next(r for r in cell.requests if r.status != "ok")
        reasons.append(f"{cell.requests_failed} of {len(cell.requests)} requests failed (first: {first.error})")
    bursts = sum(r.coalesced for r in cell.requests)
    if bursts > MAX_COALESCED_SHARE * len(cell.requests):
        reasons.append(
            f"{bursts} of {len(cell.requests)} streams arrived in one burst (median gap between chunks "
            f"in fewer reads {ARRIVAL_GAP_S * 1e3:g} ms apart than {MIN_GROUP_SHARE:.0%} of their chunks; more than "
            f"{MAX_COALESCED_SHARE:.0%} allowed): the server buffered "
            "them, so per-stream decode rate is not measurable"
        )
    if cell.max_running_observed is not None and cell.max_running_observed < cell.concurrency:
        reasons.append(
            f"concurrency {cell.concurrency} never reached (max running observed {cell.max_running_observed})"
        )
    hit = cell.window.prefix_cache_hit_rate
    if hit is not None and hit >= max_prefix_cache_hit_rate:
        reasons.append(f"prefix-cache hit rate {hit:.1%} >= {max_prefix_cache_hit_rate:.0%}: prompts were cached")
    flags = []
    rep = cell.repetition_ratio_median
    if rep is not None and rep > repetition_flag_ratio:
        flags.append(f"acceptance may be inflated by repetition (median repetition ratio {rep:.2f})")
    return cell.model_copy(
        update={"rejected": bool(reasons), "reject_reason": "; ".join(reasons) or None, "flags": flags}
    )


async def _run_cell(
    client: Client, concurrency: int, prompt_class: str, max_prefix_cache_hit_rate: float
) -> CellResult:
    """Closed loop: `concurrency` workers send requests back to back.

    Request-count mode sends `requests_per_cell` requests. Duration mode keeps sending for
    `duration_s` and counts only requests that started and finished inside that window;
    the counter window closes at the deadline too.
    """
    wl = client.workload
    cell_ns = f"{client.target.namespace}:c{concurrency}"

    def make(i: int) -> Awaitable[Prompt]:
        return build_prompt(prompt_class, wl.seed, i, cell_ns, wl.prompt_tokens, client.tokenize)

    # Prompts are calibrated before the window opens, so /tokenize traffic never lands inside it.
    pool = list(enumerate(await asyncio.gather(*(make(i) for i in range(wl.requests_per_cell)))))
    pool.reverse()
    next_index = len(pool)
    results: list[tuple[RequestSample, list[int] | str]] = []
    deadline = math.inf

    async def worker() -> None:
        nonlocal next_index
        while time.perf_counter() < deadline:
            if pool:
                index, prompt = pool.pop()
            elif wl.duration_s is not None:
                index, next_index = next_index, next_index + 1
                prompt = await make(index)  # the pre-built pool ran dry: a longer window than expected
            else:
                return
            results.append(await client.stream_completion(index, prompt, wl.max_tokens))

    before = await client.metrics()
    stop = asyncio.Event()
    sampler = asyncio.create_task(_max_running(client, stop, concurrency))
    t0 = time.perf_counter()
    if wl.duration_s is not None:
        deadline = t0 + wl.duration_s
    workers = asyncio.gather(*(worker() for _ in range(concurrency)))
    if wl.duration_s is None:
        await workers
        wall = time.perf_counter() - t0
        after = await client.metrics()
    else:
        await asyncio.sleep(wl.duration_s)
        after = await client.metrics()
        wall = wl.duration_s
        await workers  # requests still running finish, but outside the window: they are not counted
    stop.set()
    peak = await sampler

    samples = []
    for sample, output in sorted(results, key=lambda r: r[0].index):
        started = sample.started_s - t0  # taken on the perf_counter clock; stored relative to the cell start
        if started + (sample.e2e_s or 0.0) > wall:
            continue
        # Repetition is measured on the server's own token ids; text is tokenized after the window closed.
        ids = output if isinstance(output, list) else (await client.token_ids(output) if output else [])
        samples.append(sample.model_copy(update={"started_s": started, "repetition_ratio": repetition_ratio(ids)}))
    cell = CellResult(
        concurrency=concurrency,
        prompt_class=prompt_class,
        prompt_tokens=wl.prompt_tokens,
        max_tokens=wl.max_tokens,
        wall_s=wall,
        window=window(before, after),
        max_running_observed=peak,
        requests=samples,
    )
    return gate(cell, max_prefix_cache_hit_rate, wl.repetition_flag_ratio)


PROBE_NAMESPACE = "specwatch-probe"  # fixed: every arm answers the very same probe prompts


async def probe(target: BenchTarget, workload: WorkloadSpec, count: int, max_tokens: int) -> list[list[int]]:
    """Greedy single-stream answers to fixed prompts, as token ids, for the correctness gate.

    Speculative decoding must not change greedy output, so these are compared across arms.
    """
    greedy = SamplingSpec(temperature=0.0, top_p=1.0, top_k=-1, seed=0)
    outputs = []
    async with Client(target, workload, greedy) as client:
        for i in range(count):
            prompt_class = workload.prompt_classes[i % len(workload.prompt_classes)]
            prompt = await build_prompt(prompt_class, 0, i, PROBE_NAMESPACE, workload.prompt_tokens, client.tokenize)
            sample, output = await client.stream_completion(i, prompt, max_tokens)
            if sample.status != "ok":
                raise BenchError(f"probe {i} failed: {sample.error}")
            outputs.append(output if isinstance(output, list) else await client.token_ids(output))
    return outputs


async def warm_up(client: Client) -> None:
    """Discarded requests after every (re)start: the first ones hit JIT/autotune (DOMAIN rule 5)."""
    wl = client.workload
    for i in range(wl.warmup_requests):
        prompt = await build_prompt(wl.prompt_classes[i % len(wl.prompt_classes)], wl.seed, -1 - i,
                                    f"{client.target.namespace}:warmup", wl.prompt_tokens, client.tokenize)
        sample, _ = await client.stream_completion(i, prompt, wl.max_tokens)
        if sample.status != "ok":
            raise BenchError(f"warm-up request failed: {sample.error}")


async def prepare(target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec) -> MetricsSnapshot:
    """Check the endpoint serves the model, warm it up (discarded), return its counters after warm-up.

    Once speculation has run, the counters' position labels tell the server's real k.
    """
    async with Client(target, workload, sampling) as client:
        await client.check_ready()
        await warm_up(client)
        return await client.metrics()


async def measure(
    target: BenchTarget,
    workload: WorkloadSpec,
    sampling: SamplingSpec,
    max_prefix_cache_hit_rate: float,
    on_cell: CellCallback | None = None,
) -> list[CellResult]:
    """Every cell (concurrency x prompt class), in order."""
    async with Client(target, workload, sampling) as client:
        cells = []
        for concurrency in workload.concurrency:
            for prompt_class in workload.prompt_classes:
                cell = await _run_cell(client, concurrency, prompt_class, max_prefix_cache_hit_rate)
                mal = cell.window.mean_acceptance_length
                log.info(
                    "cell c=%d %s: decode %.1f tok/s, mean acceptance length %s%s",
                    concurrency, prompt_class, cell.decode_tok_s_median or 0.0,
                    "n/a" if mal is None else f"{mal:.2f}",
                    f", REJECTED: {cell.reject_reason}" if cell.rejected else "",
                )
                cells.append(cell)
                if on_cell:
                    on_cell(cell)
        return cells


async def benchmark(
    target: BenchTarget,
    workload: WorkloadSpec,
    sampling: SamplingSpec,
    max_prefix_cache_hit_rate: float,
    on_cell: CellCallback | None = None,
) -> list[CellResult]:
    """Warm-up, then every cell, in this process."""
    await prepare(target, workload, sampling)
    return await measure(target, workload, sampling, max_prefix_cache_hit_rate, on_cell)


def _measure_sync(
    target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec, max_prefix_cache_hit_rate: float
) -> list[CellResult]:
    # A spawned process starts with default logging: keep per-cell progress visible on stderr.
    logging.basicConfig(format="%(asctime)s | %(levelname)-7s | %(name)s - %(message)s")
    logging.getLogger("specwatch").setLevel(logging.INFO)
    return asyncio.run(measure(target, workload, sampling, max_prefix_cache_hit_rate))


def measure_isolated(
    target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec, max_prefix_cache_hit_rate: float
) -> list[CellResult]:
    """`measure` in a fresh process of its own.

    Chunk arrival times are taken on the client's event loop; inside a flow process,
    Prefect's log and event threads hold the GIL often enough to stall that loop, so
    chunks pile up and are stamped together (bursts seen in whole-flow runs, not in a
    bare client against the same server).
    """
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        return pool.submit(_measure_sync, target, workload, sampling, max_prefix_cache_hit_rate).result()


run_benchmark = task(measure_isolated, name="run_benchmark")
