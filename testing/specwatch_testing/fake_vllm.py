"""A fake vLLM OpenAI-compatible server with known truth.

It imitates the HTTP surface the benchmark touches (`/health`, `/v1/models`, `/version`,
`/tokenize` for prompts and chat messages, `/v1/completions` and `/v1/chat/completions` incl.
SSE streaming, Prometheus `/metrics`) and simulates
speculative decoding with a known per-position acceptance profile and step time. `/truth`
reports what really happened server-side, so tests and the fidelity benchmark can compare
measured figures with true ones.

    python -m specwatch_testing.fake_vllm --port 8000 \
        --spec-config '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}' \
        --accept-probs 0.8,0.6,0.4 --step-ms 10

Simulation model (deliberately simple, so the truth is analytic):
- Prompt tokens: regex `\\w+|[^\\w\\s]` (one token per word or punctuation mark), no BOS.
  Chat messages go through a template of its own (`CHAT_TEMPLATE`), or are refused as vLLM
  refuses a model without one (`--no-chat-template`).
- First token after `ttft_ms + prefill_ms_per_token * uncached_prompt_tokens` from admission.
- Then one decode step per `(step_ms + step_ms_per_seq * (running - 1)) * slowdown`, on an
  absolute schedule (no drift from sleep overshoot); `--launch-sd` draws the slowdown once per boot
  (planted launch-to-launch noise). Every step with speculation proposes
  one draft of exactly k tokens (counted as 1 draft, k draft tokens, even near the end),
  accepts a prefix of it and emits accepted + 1 (bonus) tokens, capped at the tokens still
  owed; the counters record the accepted count before capping so that 1 + accepted/drafts
  is an unbiased estimate of the configured mean acceptance length.
- Acceptance: by default `--accept-probs` are the *marginal* per-position rates (what vLLM's
  accepted_per_pos/drafts reports, so they must be non-increasing); with
  `--accept-mode conditional` they are P(accept i | accepted 0..i-1). Positions past the
  list are never accepted.
- Exactly max_tokens tokens are generated (ignore_eos semantics, always). With `--tail-after N` the
  output after its first N tokens is a phrase repeated to the end (a loop); with `--eos-token-id ID`
  too, that tail starts with the end-of-sequence token (empty text), as an instruct model's answer
  that ended and went on under ignore_eos. Chunks carry their `token_ids` when the request asks.
- Everything random is seeded by `--seed` + the prompt text, so a prompt replays exactly.

Several processes behind one port (`--procs N`, `--cores 1,2,3` pins process i to the i-th core;
`--cores` alone implies `--procs`): one fake_vllm core serves ~15-19k SSE chunks/s, so a client on
several cores needs several. Each process is an engine of its own (own batch, `--max-num-seqs`,
prefix cache, `--fail-every` count) on a socket bound with SO_REUSEPORT to the public port (the kernel
spreads connections over them) and on a private port of its own. Any process's `/metrics` answers
for the whole set: its siblings' `/metrics/local` merged in, one label set per `engine` label, as
vLLM with several engines, so counter windows and the running gauge summed over labels see them
all. `/truth` merges every process's records (one monotonic clock, one t0) and sums the totals;
`/truth/reset` resets them all (`/truth/local`, `/truth/reset/local`: one process). `/tokenize`,
`/v1/models`, `/health` answer per process. The parent supervises: a child that exits stops the
set (exit 1); SIGTERM/SIGINT stop every child; a child whose parent died gets SIGTERM from the
kernel (PR_SET_PDEATHSIG). `--procs 1` (the default) is one plain uvicorn process, as always.

Planted faults (issue 12's fault matrix, docs/reliability.md): `--crash-after N` SIGKILLs the process on
completion request N+1; `--hang-after N` leaves every later completion request without a byte;
`--http-500-every N` (alias of `--fail-every`); `--bad-sse-every N` starts every Nth stream with an event
that is not JSON; `--bad-metrics malformed|missing` answers /metrics with unparseable text or 404 after
`--metrics-fault-after N` good scrapes; `--boot-delay-s`, `--refuse-k` for boots that never get ready.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import random
import re
import signal
import socket
import sys
import time
import uuid
import zlib
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from pydantic import BaseModel, ConfigDict, Field

VERSION = "fake-0.1"
BLOCK_SIZE = 16  # vLLM's default KV block size; prefix-cache hits come in whole blocks
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
# Output words are pure \w+ so re-tokenizing the generated text gives back max_tokens.
# `--tail-after`: the phrase a looping output repeats.
TAIL = ("and", "the", "loop", "goes", "on")
_WORDS = [
    "the", "of", "and", "to", "in", "is", "for", "on", "with", "as", "at", "by", "from", "that", "this", "be",
    "are", "was", "it", "an", "or", "not", "data", "value", "model", "token", "server", "request", "return",
    "result", "list", "index", "count", "state", "error", "input", "output", "build", "cache", "block", "step",
    "draft", "accept", "verify", "batch", "queue", "stream", "chunk", "graph", "kernel", "rank", "node",
    "layer", "weight", "tensor", "shape", "float", "width", "depth", "score", "delta", "base", "check", "test",
    "run",
]


def chat_template(messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
    """The fake model's chat template: a role header per message, then the assistant's header."""
    body = "".join(f"<|{m.get('role')}|>\n{m.get('content')}\n" for m in messages)
    return body + ("<|assistant|>\n" if add_generation_prompt else "")


# vLLM's words for a tokenizer without a chat template (transformers >= 4.44 has no default one).
NO_TEMPLATE = ("As of transformers v4.44, default chat template is no longer allowed, so you must provide a "
               "chat template if the tokenizer does not define one.")


def tokenize(text: str, vocab_size: int) -> list[int]:
    # crc32 rather than hash(): str hashes are randomised per process, ids must be stable.
    return [zlib.crc32(t.encode()) % vocab_size for t in _TOKEN_RE.findall(text)]


@dataclass(frozen=True)
class Settings:
    model: str = "fake/model"
    max_model_len: int = 4096
    vocab_size: int = 32000
    seed: int = 0
    ttft_ms: float = 20.0
    prefill_ms_per_token: float = 0.0
    step_ms: float = 10.0
    step_ms_per_seq: float = 0.0
    slowdown: float = 1.0
    method: str | None = None  # None = no speculation
    k: int = 0
    draft_model: str | None = None
    marginal: tuple[float, ...] = ()  # per-position acceptance rate, length k
    boot_delay_s: float = 0.0
    fail_every: int = 0
    stall_after_tokens: int | None = None
    max_num_seqs: int = 256
    log_interval_s: float = 10.0
    chat: bool = True  # the model has a chat template
    num_gpu_blocks: int = 4096  # KV-cache capacity, in BLOCK_SIZE-token blocks
    per_request_spec_decode_metrics: str = "none"  # none | summary, as vLLM's flag
    engine: int = 0  # this process's `engine` label in a multi-process server (--procs)
    # Planted faults (issue 12's fault matrix); 0 / None: off.
    crash_after: int = 0  # SIGKILL itself on completion request N+1 (as an OOM kill would)
    hang_after: int = 0  # completion requests after the Nth get no byte of an answer, ever
    bad_sse_every: int = 0  # every Nth stream carries an event that is not JSON
    bad_metrics: str | None = None  # malformed | missing: /metrics answers garbage or 404 ...
    metrics_fault_after: int = 0  # ... after this many good scrapes
    tail_after: int | None = None  # output tokens before a repeating tail (None: no tail)
    eos_token_id: int | None = None  # the tail starts with this end-of-sequence token

    @property
    def conditional(self) -> tuple[float, ...]:
        out, prev = [], 1.0
        for m in self.marginal:
            out.append(m / prev if prev > 0 else 0.0)
            prev = m
        return tuple(out)


class PrefixCache:
    """Hash-chained full blocks, like vLLM's automatic prefix caching (bounded, LRU)."""

    def __init__(self, capacity_blocks: int = 65536) -> None:
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self._cap = capacity_blocks

    def lookup_and_insert(self, ids: list[int]) -> int:
        """Tokens covered by already-cached full blocks from the start; then cache this prompt."""
        hits, h, missed = 0, 0, False
        for start in range(0, len(ids) - BLOCK_SIZE + 1, BLOCK_SIZE):
            h = hash((h, tuple(ids[start : start + BLOCK_SIZE])))  # int tuples hash stably
            if not missed and h in self._blocks:
                hits += BLOCK_SIZE
                self._blocks.move_to_end(h)
            else:
                missed = True
                self._blocks[h] = None
                if len(self._blocks) > self._cap:
                    self._blocks.popitem(last=False)
        return hits


class Metrics:
    """vLLM's metric names on a private registry (so several apps can live in one process)."""

    def __init__(self, s: Settings) -> None:
        self.registry = r = CollectorRegistry()
        lab = ["engine", "model_name"]
        self._lv = {"engine": str(s.engine), "model_name": s.model}

        def counter(name: str, doc: str, extra: list[str] | None = None) -> Counter:
            return Counter(name, doc, lab + (extra or []), registry=r)

        self.prompt = counter("vllm:prompt_tokens", "Number of prefill tokens processed.").labels(**self._lv)
        by_source = counter("vllm:prompt_tokens_by_source", "Prompt tokens by source.", ["source"])
        self.prompt_computed = by_source.labels(**self._lv, source="local_compute")
        self.prompt_cached = by_source.labels(**self._lv, source="local_cache_hit")
        self.generation = counter("vllm:generation_tokens", "Number of generation tokens processed.").labels(**self._lv)
        self.pc_queries = counter("vllm:prefix_cache_queries", "Prefix cache queries, in tokens.").labels(**self._lv)
        self.pc_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.").labels(**self._lv)
        self.running = Gauge("vllm:num_requests_running", "Requests in model execution batches.", lab, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Requests waiting to be processed.", lab, registry=r)
        self.running.labels(**self._lv).set(0)
        self.waiting.labels(**self._lv).set(0)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", lab,
                              registry=r).labels(**self._lv)
        self.kv_usage.set(0)
        # Counted when a step's blocks do not fit; the fake does not really evict anything.
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption.").labels(**self._lv)
        info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                     ["block_size", "num_gpu_blocks", "engine"], registry=r)
        info.labels(block_size=str(BLOCK_SIZE), num_gpu_blocks=str(s.num_gpu_blocks), engine=str(s.engine)).set(1)
        self.spec_enabled = s.method is not None
        if self.spec_enabled:  # vLLM registers these only when speculation is configured
            self.drafts = counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.").labels(**self._lv)
            self.draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.").labels(
                **self._lv
            )
            self.accepted = counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.").labels(
                **self._lv
            )
            per_pos = counter(
                "vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.", ["position"]
            )
            self.per_pos = [per_pos.labels(**self._lv, position=str(i)) for i in range(s.k)]

    def set_load(self, running: int, waiting: int) -> None:
        self.running.labels(**self._lv).set(running)
        self.waiting.labels(**self._lv).set(waiting)


@dataclass
class TruthRecord:
    request_id: str
    prompt_tokens: int
    max_tokens: int
    completion_tokens: int = 0
    cached_tokens: int = 0
    # Seconds since server start on the server's monotonic clock.
    t_arrival: float = 0.0
    t_admitted: float | None = None
    t_first_token: float | None = None
    t_last_token: float | None = None
    steps: int = 0  # decode steps after the first token (== drafts with speculation)
    accepted: int = 0
    acceptance_histogram: list[int] = field(default_factory=list)  # drafts by accepted tokens j = 0..k
    status: str = "running"  # ok | aborted

    @property
    def decode_tok_s(self) -> float | None:
        if self.t_first_token is None or self.t_last_token is None or self.completion_tokens < 2:
            return None
        dt = self.t_last_token - self.t_first_token
        return (self.completion_tokens - 1) / dt if dt > 0 else None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["decode_tok_s"] = self.decode_tok_s
        d["ttft_s"] = None if self.t_first_token is None else self.t_first_token - self.t_arrival
        return d


@dataclass
class Totals:
    """Sums since the last /truth/reset; equal to counter deltas over the same window."""

    requests: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    @classmethod
    def summed(cls, parts: Sequence[Totals]) -> Totals:
        """The totals of several engines (the processes of one server)."""
        out = cls(accepted_per_pos=[sum(col) for col in zip(*(p.accepted_per_pos for p in parts), strict=True)])
        for f in fields(cls):
            if f.name != "accepted_per_pos":
                setattr(out, f.name, sum(getattr(p, f.name) for p in parts))
        return out


class Engine:
    def __init__(self, s: Settings, t0: float | None = None) -> None:
        self.s = s
        self.metrics = Metrics(s)
        self.cache = PrefixCache()
        # A multi-process server shares its parent's t0 (CLOCK_MONOTONIC is system-wide): one time base.
        self.t0 = time.monotonic() if t0 is None else t0
        self.records: list[TruthRecord] = []
        self.totals = Totals(accepted_per_pos=[0] * s.k)
        self.completion_requests = 0
        self.running = 0
        self.waiting = 0
        self.kv_tokens: dict[str, int] = {}  # running request -> tokens it holds in the KV cache
        self._sem = asyncio.Semaphore(s.max_num_seqs)
        self._cond = s.conditional

    def now(self) -> float:
        return time.monotonic() - self.t0

    def booting(self) -> bool:
        return self.now() < self.s.boot_delay_s

    def reset_truth(self) -> None:
        self.records = []
        self.totals = Totals(accepted_per_pos=[0] * self.s.k)

    def _hold_kv(self, request_id: str, tokens: int) -> None:
        """Blocks held by every running request, as vLLM's usage gauge; an overflow counts a preemption."""
        if tokens:
            self.kv_tokens[request_id] = tokens
        else:
            self.kv_tokens.pop(request_id, None)
        used = sum(-(-t // BLOCK_SIZE) for t in self.kv_tokens.values())
        if used > self.s.num_gpu_blocks:
            self.metrics.preemptions.inc()
        self.metrics.kv_usage.set(min(used / self.s.num_gpu_blocks, 1.0))

    def _step_s(self) -> float:
        s = self.s
        return (s.step_ms + s.step_ms_per_seq * max(self.running - 1, 0)) * s.slowdown / 1000

    def _sample_accepted(self, rng: random.Random) -> int:
        a = 0
        for p in self._cond:  # acceptance is a prefix: stop at the first rejection
            if rng.random() >= p:
                break
            a += 1
        return a

    async def _sleep_until(self, deadline: float) -> None:
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))

    async def _stall(self, is_disconnected: Callable[[], Awaitable[bool]] | None) -> None:
        # Streams get cancelled by Starlette on disconnect; plain requests must poll.
        while True:
            await asyncio.sleep(0.1)
            if is_disconnected is not None and await is_disconnected():
                return

    async def generate(
        self,
        request_id: str,
        prompt: str,
        prompt_ids: list[int],
        max_tokens: int,
        is_disconnected: Callable[[], Awaitable[bool]] | None = None,
    ) -> AsyncGenerator[tuple[str, list[int]], None]:
        """Yield one text piece and its token ids per engine step (several tokens under speculation)."""
        s, m, tot = self.s, self.metrics, self.totals
        text_rng = random.Random(f"{s.seed}:text:{prompt}")
        acc_rng = random.Random(f"{s.seed}:accept:{prompt}")
        rec = TruthRecord(request_id, len(prompt_ids), max_tokens, t_arrival=self.now(),
                          acceptance_histogram=[0] * (s.k + 1) if m.spec_enabled else [])
        admitted = False
        self.waiting += 1
        m.set_load(self.running, self.waiting)
        try:
            await self._sem.acquire()
            admitted = True
            self.waiting -= 1
            self.running += 1
            m.set_load(self.running, self.waiting)
            rec.t_admitted = self.now()
            p = len(prompt_ids)
            hits = self.cache.lookup_and_insert(prompt_ids)
            rec.cached_tokens = hits
            m.prompt.inc(p)
            m.prompt_computed.inc(p - hits)
            m.prompt_cached.inc(hits)
            m.pc_queries.inc(p)
            m.pc_hits.inc(hits)
            tot.requests += 1
            tot.prompt_tokens += p
            tot.prefix_cache_queries += p
            tot.prefix_cache_hits += hits

            # Cached tokens skip prefill, as in vLLM: that is how repeats inflate results.
            deadline = time.monotonic() + (s.ttft_ms + s.prefill_ms_per_token * (p - hits)) / 1000
            emitted = 0
            while emitted < max_tokens:
                if s.stall_after_tokens is not None and emitted >= s.stall_after_tokens:
                    await self._stall(is_disconnected)
                    return
                a = None  # accepted draft tokens this step; None = no draft (prefill or no spec)
                if emitted == 0:
                    n = 1  # the prefill step yields exactly one token
                else:
                    deadline += self._step_s()
                    n = 1
                    if m.spec_enabled:
                        a = self._sample_accepted(acc_rng)
                        n = min(a + 1, max_tokens - emitted)
                await self._sleep_until(deadline)
                # Counters move when the step completes, like the engine's per-step stats.
                if emitted > 0:
                    rec.steps += 1
                if a is not None:
                    m.drafts.inc()
                    m.draft_tokens.inc(s.k)
                    m.accepted.inc(a)
                    for i in range(a):
                        m.per_pos[i].inc()
                        tot.accepted_per_pos[i] += 1
                    tot.drafts += 1
                    tot.draft_tokens += s.k
                    tot.accepted += a
                    rec.accepted += a
                    rec.acceptance_histogram[a] += 1
                m.generation.inc(n)
                tot.generation_tokens += n
                emitted += n
                self._hold_kv(request_id, p + emitted)
                rec.completion_tokens = emitted
                rec.t_last_token = self.now()
                if rec.t_first_token is None:
                    rec.t_first_token = rec.t_last_token
                yield self._piece(emitted - n, n, text_rng)
        finally:
            # Runs on normal end, on client disconnect (cancel) and on generator close.
            if admitted:
                self.running -= 1
                self._hold_kv(request_id, 0)
                self._sem.release()
            else:
                self.waiting -= 1
            m.set_load(self.running, self.waiting)
            rec.status = "ok" if rec.completion_tokens == max_tokens else "aborted"
            self.records.append(rec)

    def _piece(self, start: int, n: int, rng: random.Random) -> tuple[str, list[int]]:
        """Output tokens start..start+n-1: random words, or the tail (`--tail-after`) with its EOS first."""
        s, text, ids = self.s, "", []
        for p in range(start, start + n):
            if s.tail_after is not None and p == s.tail_after and s.eos_token_id is not None:
                ids.append(s.eos_token_id)  # vLLM skips a special token's text
                continue
            word = rng.choice(_WORDS) if s.tail_after is None or p < s.tail_after else TAIL[p % len(TAIL)]
            text += " " + word
            ids += tokenize(word, s.vocab_size)
        return text, ids

    def truth(self) -> dict[str, Any]:
        return truth_view(self.s, [r.as_dict() for r in self.records], self.totals)


def truth_view(s: Settings, records: list[dict[str, Any]], t: Totals) -> dict[str, Any]:
    """/truth's body: the configuration, the records and the totals with their derived rates."""
    step_s = s.step_ms * s.slowdown / 1000
    tokens_per_step = 1 + sum(s.marginal)
    return {
        "config": {
            "model": s.model,
            "method": s.method,
            "k": s.k,
            "accept_probs_marginal": list(s.marginal),
            "accept_probs_conditional": list(s.conditional),
            "step_ms": s.step_ms,
            "step_ms_per_seq": s.step_ms_per_seq,
            "slowdown": s.slowdown,
            "ttft_ms": s.ttft_ms,
            "prefill_ms_per_token": s.prefill_ms_per_token,
            # Ignores the capped final step, so long outputs approach it from below.
            "expected_mean_acceptance_length": tokens_per_step,
            "expected_decode_tok_s_c1": tokens_per_step / step_s,
        },
        "records": records,
        "totals": {
            **asdict(t),
            "mean_acceptance_length": 1 + t.accepted / t.drafts if t.drafts else None,
            "per_position_acceptance": [a / t.drafts for a in t.accepted_per_pos] if t.drafts else None,
            "draft_acceptance_rate": t.accepted / t.draft_tokens if t.draft_tokens else None,
        },
    }


def merged_truth(s: Settings, parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One /truth for several engines' /truth/local: every record (by arrival), the totals summed."""
    records = sorted((r for p in parts for r in p["records"]), key=lambda r: r["t_arrival"])
    totals = Totals.summed([Totals(**{f.name: p["totals"][f.name] for f in fields(Totals)}) for p in parts])
    return truth_view(s, records, totals)


class MergedFamilies(Collector):
    """Several engines' expositions as one: a family's samples from all of them (label sets differ by `engine`).

    Every text is parsed, this process's own too, so each family (and each `_created` gauge) appears once.
    """

    def __init__(self, texts: Iterable[str]) -> None:
        merged: dict[str, Metric] = {}
        for text in texts:
            for family in text_string_to_metric_families(text):
                if family.name in merged:
                    merged[family.name].samples.extend(family.samples)
                else:
                    merged[family.name] = family
        self._families = list(merged.values())

    def collect(self) -> Iterable[Metric]:
        return self._families


class Siblings:
    """The other processes of a multi-process server, by their private base URLs (none: a plain server)."""

    def __init__(self, urls: Sequence[str]) -> None:
        self.urls = list(urls)
        self._http: httpx.AsyncClient | None = None

    async def each(self, method: str, path: str) -> list[httpx.Response]:
        if not self.urls:
            return []
        if self._http is None:  # made on the server's own event loop
            self._http = httpx.AsyncClient(timeout=10, trust_env=False)
        responses = await asyncio.gather(*(self._http.request(method, url + path) for url in self.urls))
        for r in responses:
            r.raise_for_status()
        return list(responses)

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()


class _StreamOptions(BaseModel):
    include_usage: bool = False


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="ignore")  # vLLM accepts many more sampling fields

    model: str | None = None
    max_tokens: int = Field(16, ge=1)  # vLLM's default for completions
    min_tokens: int = 0
    ignore_eos: bool = False
    temperature: float | None = None
    stream: bool = False
    stream_options: _StreamOptions | None = None
    return_token_ids: bool = False


class CompletionRequest(_Sampling):
    prompt: str | list[str]


class ChatRequest(_Sampling):
    messages: list[dict[str, Any]] = Field(min_length=1)


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": status}}, status_code=status
    )


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


def build_app(s: Settings, siblings: Sequence[str] = (), t0: float | None = None) -> FastAPI:
    """The server; `siblings`: the private URLs of the other processes it answers /metrics and /truth for."""
    engine = Engine(s, t0)
    others = Siblings(siblings)

    async def log_stats() -> None:
        # Mirrors the engine's periodic "SpecDecoding metrics:" log line (interval window).
        last = (0, 0, [0] * s.k)
        while True:
            await asyncio.sleep(s.log_interval_s)
            t = engine.totals
            now = (t.drafts, t.accepted, list(t.accepted_per_pos))
            drafts, acc = now[0] - last[0], now[1] - last[1]
            if drafts > 0:
                per_pos = ", ".join(f"{(b - a) / drafts:.3f}" for a, b in zip(last[2], now[2], strict=True))
                print(
                    f"INFO {time.strftime('%m-%d %H:%M:%S')} [metrics.py] SpecDecoding metrics: "
                    f"Mean acceptance length: {1 + acc / drafts:.2f}, "
                    f"Accepted throughput: {acc / s.log_interval_s:.2f} tokens/s, "
                    f"Drafted throughput: {drafts * s.k / s.log_interval_s:.2f} tokens/s, "
                    f"Accepted: {acc} tokens, Drafted: {drafts * s.k} tokens, "
                    f"Per-position acceptance rate: {per_pos}, "
                    f"Avg Draft acceptance rate: {100 * acc / (drafts * s.k):.1f}%",
                    flush=True,
                )
            last = now if now[0] >= last[0] else (0, 0, [0] * s.k)  # truth may have been reset

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(log_stats()) if s.method and s.log_interval_s > 0 else None
        yield
        if task:
            task.cancel()
        await others.aclose()

    app = FastAPI(title="fake_vllm", lifespan=lifespan)
    app.state.engine = engine

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(400, str(exc.errors()), "BadRequestError")  # vLLM answers 400, not 422

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=503 if engine.booting() else 200)

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": VERSION}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": s.model, "object": "model", "created": int(engine.t0), "owned_by": "vllm"}
        card |= {"root": s.model, "parent": None, "max_model_len": s.max_model_len}
        return {"object": "list", "data": [card]}

    @app.post("/tokenize")
    async def tokenize_endpoint(body: dict[str, Any]) -> Response:
        prompt = body.get("prompt")
        if isinstance(body.get("messages"), list):
            if not s.chat:
                return _error(400, NO_TEMPLATE, "BadRequestError")
            prompt = chat_template(body["messages"], bool(body.get("add_generation_prompt", True)))
        if not isinstance(prompt, str):
            return _error(400, "tokenize needs a string 'prompt' or a list of 'messages'", "BadRequestError")
        ids = tokenize(prompt, s.vocab_size)
        return JSONResponse({"count": len(ids), "max_model_len": s.max_model_len, "tokens": ids, "token_strs": None})

    @app.get("/metrics/local")
    async def metrics_local() -> Response:
        return Response(generate_latest(engine.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    scrapes = 0

    @app.get("/metrics")
    async def metrics() -> Response:
        nonlocal scrapes
        scrapes += 1
        if s.bad_metrics and scrapes > s.metrics_fault_after:
            if s.bad_metrics == "missing":
                return Response("Not Found", status_code=404)
            return Response(BAD_METRICS, media_type=CONTENT_TYPE_LATEST)
        if not others.urls:
            return await metrics_local()
        texts = [generate_latest(engine.metrics.registry).decode()]
        texts += [r.text for r in await others.each("GET", "/metrics/local")]
        return Response(generate_latest(MergedFamilies(texts)), media_type=CONTENT_TYPE_LATEST)

    @app.get("/truth/local")
    async def truth_local() -> dict[str, Any]:
        return engine.truth()

    @app.get("/truth")
    async def truth() -> dict[str, Any]:
        if not others.urls:
            return engine.truth()
        return merged_truth(s, [engine.truth(), *(r.json() for r in await others.each("GET", "/truth/local"))])

    @app.post("/truth/reset/local")
    async def truth_reset_local() -> dict[str, bool]:
        engine.reset_truth()
        return {"ok": True}

    @app.post("/truth/reset")
    async def truth_reset() -> dict[str, bool]:
        engine.reset_truth()
        await others.each("POST", "/truth/reset/local")
        return {"ok": True}

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, raw: Request) -> Response:
        if isinstance(req.prompt, list):
            if len(req.prompt) != 1:
                return _error(400, "fake_vllm supports exactly one prompt per request", "BadRequestError")
            return await serve(req, req.prompt[0], raw, chat=False)
        return await serve(req, req.prompt, raw, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatRequest, raw: Request) -> Response:
        if not s.chat:
            return _error(400, NO_TEMPLATE, "BadRequestError")
        return await serve(req, chat_template(req.messages), raw, chat=True)

    async def serve(req: _Sampling, prompt: str, raw: Request, chat: bool) -> Response:
        if engine.booting():
            return _error(503, "server is starting", "ServiceUnavailableError")
        engine.completion_requests += 1
        if s.crash_after and engine.completion_requests > s.crash_after:
            print(f"ERROR fake_vllm: planted crash (--crash-after {s.crash_after})", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if s.hang_after and engine.completion_requests > s.hang_after:
            await asyncio.Event().wait()  # never set: the client's read timeout has to end it
        if s.fail_every and engine.completion_requests % s.fail_every == 0:
            return _error(500, f"fake_vllm: planted failure (--fail-every {s.fail_every})", "InternalServerError")
        if req.model is not None and req.model != s.model:
            return _error(404, f"The model `{req.model}` does not exist.", "NotFoundError")
        ids = tokenize(prompt, s.vocab_size)
        if len(ids) + req.max_tokens > s.max_model_len:
            return _error(
                400,
                f"This model's maximum context length is {s.max_model_len} tokens. However, you requested "
                f"{len(ids) + req.max_tokens} tokens ({len(ids)} in the messages, {req.max_tokens} in the "
                "completion). Please reduce the length of the messages or completion.",
                "BadRequestError",
            )
        # vLLM builds the id from X-Request-Id when given: lets clients join to /truth.
        rid = ("chatcmpl-" if chat else "cmpl-") + (raw.headers.get("x-request-id") or uuid.uuid4().hex)
        created = int(time.time())
        kind = "chat.completion" if chat else "text_completion"
        head = {"id": rid, "object": kind, "created": created, "model": s.model}

        def usage_of(c: int) -> dict[str, int]:
            return {"prompt_tokens": len(ids), "completion_tokens": c, "total_tokens": len(ids) + c}

        def choice_of(text: str, finish: str | None, streamed: bool) -> dict[str, Any]:
            if not chat:
                return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            said = {"content": text} if streamed else {"role": "assistant", "content": text}
            return {"index": 0, "delta" if streamed else "message": said, "logprobs": None, "finish_reason": finish}

        if not req.stream:
            pieces = [p async for p in engine.generate(rid, prompt, ids, req.max_tokens, raw.is_disconnected)]
            text = "".join(t for t, _ in pieces)
            choice = {**choice_of(text, "length", streamed=False), "stop_reason": None}
            n = sum(len(i) for _, i in pieces)
            return JSONResponse({**head, "choices": [choice], "usage": usage_of(n)})

        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        chunk_head = {**head, "object": "chat.completion.chunk"} if chat else head

        garbled = bool(s.bad_sse_every and engine.completion_requests % s.bad_sse_every == 0)

        async def stream() -> AsyncIterator[str]:
            emitted = 0
            if garbled:
                yield "data: {this is not json\n\n"
            if chat:  # vLLM's first chat chunk carries the role and no tokens
                first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                         "finish_reason": None}
                yield _sse({**chunk_head, "choices": [first]})
            # aclosing: if the client goes away, the engine's bookkeeping (finally) runs now, not at GC.
            async with aclosing(engine.generate(rid, prompt, ids, req.max_tokens)) as pieces:
                async for piece, piece_ids in pieces:
                    emitted += len(piece_ids)
                    # As in vLLM, the chunk carrying the last tokens also carries finish_reason.
                    finish = "length" if emitted >= req.max_tokens else None
                    choice = choice_of(piece, finish, streamed=True)
                    if req.return_token_ids:
                        choice["token_ids"] = piece_ids
                    if finish:
                        choice["stop_reason"] = None
                    yield _sse({**chunk_head, "choices": [choice]})
            if include_usage:
                final: dict[str, Any] = {**chunk_head, "choices": [], "usage": usage_of(emitted)}
                # vLLM --per-request-spec-decode-metrics: the figures ride on the final usage chunk.
                rec = next((r for r in reversed(engine.records) if r.request_id == rid), None)
                if s.per_request_spec_decode_metrics != "none" and rec and rec.acceptance_histogram:
                    final["metrics"] = {"speculative_decoding": spec_decode_metrics(rec, s.k)}
                yield _sse(final)
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    return app


# A /metrics answer that is not Prometheus exposition (a proxy's error page, a truncated scrape).
BAD_METRICS = "vllm:generation_tokens_total{engine=\"0\"} not-a-number\n<html>502 Bad Gateway</html>\n"


def spec_decode_metrics(rec: TruthRecord, k: int) -> dict[str, Any]:
    """vLLM's `metrics.speculative_decoding` response object (RequestSpecDecodeMetrics.to_dict, summary)."""
    steps = sum(rec.acceptance_histogram)
    return {"mean_acceptance_length": 1.0 + rec.accepted / steps if steps else 1.0,
            "draft_acceptance_rate": rec.accepted / (steps * k) if steps else 0.0,
            "acceptance_histogram": list(rec.acceptance_histogram), "num_spec_steps": steps,
            "num_accepted_draft_tokens": rec.accepted, "num_draft_tokens": steps * k, "num_spec_tokens": k}


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


# One production deployment's per-position profile at k=7 (DOMAIN.md); a realistic default.
DEFAULT_ACCEPT = "0.94,0.86,0.77,0.69,0.61,0.49,0.35"


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    ap = argparse.ArgumentParser(prog="python -m specwatch_testing.fake_vllm", description=__doc__.split("\n\n")[0])
    a = ap.add_argument
    a("--host", default="127.0.0.1")
    a("--port", type=int, default=8000)
    a("--procs", type=int, default=None,
      help="server processes behind --port (SO_REUSEPORT), /metrics and /truth summed over all; default: one "
           "per --cores entry, else 1")  # fmt: skip
    a("--cores", type=_ints, default=(), help="comma-separated cores, one per process, each pinned to its own")
    a("--model", default="fake/model", help="model id served (also --served-model-name)")
    a("--served-model-name", default=None)
    a("--max-model-len", type=int, default=4096)
    a("--vocab-size", type=int, default=32000)
    a("--seed", type=int, default=0)
    a("--spec-config", "--speculative-config", dest="spec_config", default=None,
      help="vLLM speculative config JSON; absent = no speculation")  # fmt: skip
    a("--accept-probs", default=DEFAULT_ACCEPT, help="per-position acceptance, comma-separated")
    a("--accept-mode", choices=("marginal", "conditional"), default="marginal",
      help="marginal: rate at position i as vLLM reports it; conditional: P(i | 0..i-1 accepted)")  # fmt: skip
    a("--ttft-ms", type=float, default=20.0)
    a("--prefill-ms-per-token", type=float, default=0.0)
    a("--step-ms", type=float, default=10.0)
    a("--step-ms-per-seq", type=float, default=0.0, help="extra step time per other running sequence")
    a("--max-num-seqs", type=int, default=256, help="requests beyond this wait (num_requests_waiting)")
    a("--boot-delay-s", type=float, default=0.0, help="/health answers 503 until this has elapsed")
    a("--refuse-k", type=_ints, default=(), help="exit(1) at startup if k is in this list")
    a("--fail-every", "--http-500-every", dest="fail_every", type=int, default=0,
      help="every Nth completion request returns HTTP 500")
    a("--crash-after", type=int, default=0, help="SIGKILL itself on completion request N+1")
    a("--hang-after", type=int, default=0, help="completion requests after the Nth never get an answer")
    a("--bad-sse-every", type=int, default=0, help="every Nth stream starts with an SSE event that is not JSON")
    a("--bad-metrics", choices=("malformed", "missing"), default=None,
      help="/metrics answers unparseable text, or 404, after --metrics-fault-after good scrapes")
    a("--metrics-fault-after", type=int, default=0, help="good /metrics scrapes before --bad-metrics starts")
    a("--tail-after", type=int, default=None, help="output tokens before a repeating tail (a loop)")
    a("--eos-token-id", type=int, default=None, help="the --tail-after tail starts with this EOS token")
    a("--slowdown", type=float, default=1.0, help="multiplies step time (a planted regression)")
    a("--launch-sd", type=float, default=0.0,
      help="planted launch-to-launch noise: each boot multiplies --slowdown by exp(N(0, sd)), drawn once (/truth "
           "reports the result), as identical boots of a real server differ (measurement rule 7)")  # fmt: skip
    a("--stall-after-tokens", type=int, default=None, help="streams hang after N tokens")
    a("--log-interval-s", type=float, default=10.0, help="period of the SpecDecoding metrics log line")
    a("--no-chat-template", dest="chat", action="store_false",
      help="the model has no chat template: chat requests and /tokenize messages are refused, as by vLLM")  # fmt: skip
    a("--num-gpu-blocks", type=int, default=4096, help="KV-cache capacity in 16-token blocks (cache_config_info)")
    a("--per-request-spec-decode-metrics", choices=("none", "summary"), default="none",
      help="as vLLM: per-request speculative figures on the final usage chunk")  # fmt: skip
    # Launchers render real-vLLM command lines; tolerate (and report) flags we do not model.
    return ap.parse_known_args(argv)


def settings_from_args(ns: argparse.Namespace) -> Settings:
    """Validate; raise ValueError with vLLM-like wording on bad input."""
    method = draft = None
    k = 0
    marginal: tuple[float, ...] = ()
    if ns.spec_config:
        cfg = json.loads(ns.spec_config)
        method = cfg.get("method") or ("draft_model" if cfg.get("model") else None)
        k = int(cfg.get("num_speculative_tokens") or 0)
        draft = cfg.get("model")
        if not method or k < 1:
            raise ValueError(f"speculative config needs a method and num_speculative_tokens >= 1: {cfg}")
        if k in ns.refuse_k:
            raise ValueError(f"num_speculative_tokens={k} is not supported")
        probs = _floats(ns.accept_probs)
        if any(not 0 <= p <= 1 for p in probs):
            raise ValueError(f"accept probabilities must lie in [0, 1]: {probs}")
        if ns.accept_mode == "conditional":
            cum, acc = [], 1.0
            for p in probs:
                acc *= p
                cum.append(acc)
            probs = tuple(cum)
        elif any(b > a for a, b in zip(probs, probs[1:], strict=False)):
            raise ValueError(f"marginal per-position acceptance must be non-increasing: {probs}")
        marginal = (probs + (0.0,) * k)[:k]  # positions past the list are never accepted
    # Every setting with a command-line option of the same name comes from it (argparse dests).
    given = {f.name: getattr(ns, f.name) for f in fields(Settings) if hasattr(ns, f.name)}
    if ns.launch_sd < 0:
        raise ValueError(f"--launch-sd {ns.launch_sd}: must be >= 0")
    # unseeded on purpose: every boot is a new draw, like every launch of a real server
    slowdown = ns.slowdown * math.exp(random.SystemRandom().gauss(0.0, ns.launch_sd)) if ns.launch_sd else ns.slowdown
    return Settings(**{**given, "model": ns.served_model_name or ns.model, "method": method, "k": k,
                       "draft_model": draft, "marginal": marginal, "slowdown": slowdown})


def process_cores(ns: argparse.Namespace) -> list[int | None]:
    """One entry per server process: the core it is pinned to (None: not pinned)."""
    cores: list[int | None] = list(ns.cores)
    procs = ns.procs if ns.procs is not None else max(len(cores), 1)
    if procs < 1:
        raise ValueError(f"--procs {procs}: a server needs at least 1 process")
    if cores and len(cores) != procs:
        raise ValueError(f"--cores lists {len(cores)} cores for --procs {procs}: give one core per process")
    return cores or [None] * procs


# Graceful-shutdown timeout: stalled streams must not keep SIGTERM from ending us.
_UVICORN: dict[str, Any] = {"log_level": "info", "access_log": False, "timeout_graceful_shutdown": 2}
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _listener(host: str, port: int, reuse_port: bool) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    # Listening before the children start: a connection the kernel gives a child still booting waits for it.
    sock.listen(2048)
    return sock


def _serve_child(s: Settings, own: tuple[socket.socket, ...], every: Sequence[socket.socket],
                 siblings: list[str], core: int | None, t0: float, parent: int) -> None:
    # The kernel SIGTERMs a child whose parent died, even by SIGKILL: no child outlives its set.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before prctl took hold
        return
    for sock in every:
        if sock not in own:  # a sibling's socket kept open here would queue connections nobody accepts
            sock.close()
    if core is not None:
        os.sched_setaffinity(0, {core})
    uvicorn.Server(uvicorn.Config(build_app(s, siblings, t0), **_UVICORN)).run(sockets=list(own))


def serve_procs(s: Settings, host: str, port: int, cores: list[int | None]) -> int:
    """One server process per entry of `cores` behind `port`; returns the exit code once all are stopped."""
    public = [_listener(host, port, reuse_port=True)]
    port = public[0].getsockname()[1]  # --port 0: the others join the port the first one got
    public += [_listener(host, port, reuse_port=True) for _ in cores[1:]]
    private = [_listener("127.0.0.1", 0, reuse_port=False) for _ in cores]
    urls = [f"http://127.0.0.1:{sock.getsockname()[1]}" for sock in private]
    t0 = time.monotonic()
    fork = multiprocessing.get_context("fork")  # the children inherit the bound sockets
    children = [
        fork.Process(target=_serve_child, name=f"fake_vllm-{i}",
                     args=(replace(s, engine=i), (public[i], private[i]), [*public, *private],
                           urls[:i] + urls[i + 1 :], core, t0, os.getpid()))
        for i, core in enumerate(cores)
    ]  # fmt: skip

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds into the finally below (uvicorn replaces it in the children)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        for child in children:
            child.start()
        for sock in (*public, *private):
            sock.close()  # each child holds its own two
        multiprocessing.connection.wait([child.sentinel for child in children])
        gone = ", ".join(f"{c.name} (exit {c.exitcode})" for c in children if c.exitcode is not None)
        print(f"ERROR fake_vllm {gone} ended; stopping the others", file=sys.stderr, flush=True)
        return 1
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):  # a second signal must not abandon the children
            signal.signal(sig, signal.SIG_IGN)
        for child in children:
            if child.is_alive():
                child.terminate()
        for child in children:
            child.join(5)
            if child.is_alive():
                child.kill()
                child.join()


def main(argv: list[str] | None = None) -> None:
    ns, unknown = parse_args(argv)
    try:
        s = settings_from_args(ns)
        cores = process_cores(ns)
    except ValueError as e:
        # Same shape as a vLLM config-validation failure, so log scrapers see the real thing.
        print(f"ERROR fake_vllm engine startup failed\nValueError: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    if unknown:
        print(f"WARNING fake_vllm ignores unsupported arguments: {' '.join(unknown)}", file=sys.stderr, flush=True)
    spec = "None"
    if s.method:
        model = repr(s.draft_model) if s.draft_model else "None"
        spec = f"SpeculativeConfig(method={s.method!r}, model={model}, num_spec_tokens={s.k})"
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"INFO {stamp} [api_server.py] vLLM API server version {VERSION}", flush=True)
    print(
        f"INFO {stamp} [core.py] Initializing a V1 LLM engine (v{VERSION}) with config: model={s.model!r}, "
        f"max_seq_len={s.max_model_len}, seed={s.seed}, speculative_config={spec}",
        flush=True,
    )
    print(f"INFO {stamp} [kv_cache_utils.py] CPU KV cache size: {s.num_gpu_blocks * BLOCK_SIZE:,} tokens", flush=True)
    pinned = f", cores {','.join(map(str, cores))}" if cores[0] is not None else ""
    where = "" if len(cores) == 1 else f" ({len(cores)} processes{pinned})"
    print(f"INFO {stamp} [api_server.py] Starting vLLM API server on http://{ns.host}:{ns.port}{where}", flush=True)
    if len(cores) > 1:
        sys.exit(serve_procs(s, ns.host, ns.port, cores))
    if cores[0] is not None:
        os.sched_setaffinity(0, {cores[0]})
    uvicorn.run(build_app(s), host=ns.host, port=ns.port, **_UVICORN)


if __name__ == "__main__":
    main()
