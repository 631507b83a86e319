"""One httpx.AsyncClient per benchmark: every call specwatch makes to an endpoint goes through here.

Per request it times TTFT and decode from the stream but counts tokens from `usage`
(under speculation one SSE chunk carries several tokens). What carries the requests under
httpx is the workload's `client_transport` (specwatch.bench.transports).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from specwatch.bench.metrics import MetricsError, MetricsSnapshot, parse_metrics
from specwatch.bench.prompts import Conversation, Prompt, user
from specwatch.bench.protocols import RequestProtocol, protocol_for
from specwatch.bench.transports import transport_for
from specwatch.records import ARRIVAL_GAP_S, RequestSample, itl_bucket
from specwatch.spec import SamplingSpec, WorkloadSpec

Output = list[int] | str  # token ids when the server sends them, else text


def output_hash(text: str) -> str:
    """A short fingerprint of a request's output text: equal prompts give equal hashes under greedy decoding
    unless the arms' numerics diverge (pairs the arms' outputs without storing them)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class BenchError(Exception):
    """The endpoint cannot be benchmarked at all (down, not OpenAI-compatible)."""


@dataclass(frozen=True)
class BenchTarget:
    base_url: str
    model: str
    # Seeds the nonces and request ids: the same for every arm of a round (engine/namespaces.py); content stays seeded.
    namespace: str
    # Where each cell's prompts are also written as the peer's dataset (specwatch.export.peer_dataset).
    dataset_dir: Path | None = None
    # The served checkpoint's end-of-sequence ids: loops are judged on the output before the first one.
    eos_token_ids: tuple[int, ...] = ()


def _timeout(workload: WorkloadSpec) -> httpx.Timeout:
    return httpx.Timeout(
        connect=workload.connect_timeout_s, read=workload.read_timeout_s, write=30.0, pool=workload.read_timeout_s
    )


# Pauses between tries of a failed /metrics scrape (Client.metrics).
METRICS_BACKOFF_S = (0.2, 0.5)

# Besides its streams a cell keeps a /metrics poll and its window's snapshots in flight.
SPARE_CONNECTIONS = 4

# vLLM's API server (uvicorn) closes a connection idle for 5 s (VLLM_HTTP_TIMEOUT_KEEP_ALIVE). httpx's
# default expiry is the same 5 s, so a client reusing a connection at 4.9 s idle could write into one the
# server is closing; dropping ours at 2 s leaves the race to a client stalled for seconds.
KEEPALIVE_EXPIRY_S = 2.0


def _error_message(resp: httpx.Response) -> str:
    """An OpenAI-style error body's message (vLLM: {"error": {"message": ...}}), else the text, on one line."""
    try:
        text = str(resp.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        text = resp.text
    return " ".join(text.split())[:200]


class Client:
    def __init__(self, target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec, streams: int = 1) -> None:
        """`streams`: the most requests this client has in flight at once (its share of a cell's load)."""
        self.target = target
        self.workload = workload
        self.sampling = sampling
        self.protocol: RequestProtocol = protocol_for(workload.protocol)
        limit = streams + SPARE_CONNECTIONS
        limits = httpx.Limits(max_connections=limit, max_keepalive_connections=limit,
                              keepalive_expiry=KEEPALIVE_EXPIRY_S)
        self.http = httpx.AsyncClient(
            base_url=target.base_url,
            timeout=_timeout(workload),
            transport=transport_for(workload.client_transport).make(limits),
        )

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def _tokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST /tokenize, which changes nothing on the server: a request whose connection failed under it
        (one a stalled client kept past the server's keep-alive, CI stop 29) is sent once more."""
        try:
            resp = await self.http.post("/tokenize", json=body)
        except httpx.TransportError:
            resp = await self.http.post("/tokenize", json=body)
        resp.raise_for_status()
        result: dict[str, Any] = resp.json()
        return result

    async def count(self, messages: Conversation) -> int:
        """The prompt's token count as the protocol sends it (for chat: through the chat template)."""
        return int((await self._tokenize(self.protocol.tokenize_body(self.target.model, messages)))["count"])

    async def token_ids(self, text: str) -> list[int]:
        body = await self._tokenize({"model": self.target.model, "prompt": text})
        return body.get("tokens") or [0] * int(body["count"])

    async def metrics(self) -> MetricsSnapshot:
        """The counters now. A scrape is safe to repeat, so a failed one is retried with backoff; when
        all fail, the snapshot carries the reason and no counters (the cell then says so), never an exception."""
        error = ""
        for delay in (*METRICS_BACKOFF_S, None):
            try:
                resp = await self.http.get("/metrics")
                resp.raise_for_status()
                return parse_metrics(resp.text)
            except (httpx.HTTPError, MetricsError) as exc:
                error = str(exc) if isinstance(exc, MetricsError) else f"/metrics: {type(exc).__name__}: {exc}"[:200]
            if delay is not None:
                await asyncio.sleep(delay)
        return MetricsSnapshot(error=f"{error} (after {len(METRICS_BACKOFF_S) + 1} tries)")

    async def metrics_text(self) -> str:
        resp = await self.http.get("/metrics")
        resp.raise_for_status()
        return resp.text

    async def open_connections(self, count: int) -> None:
        """Open `count` pooled connections now (concurrent GET /health: no engine work), so that
        connecting does not happen on the first requests of a window."""
        await asyncio.gather(*(self.http.get("/health") for _ in range(count)))

    async def check_ready(self) -> None:
        try:
            resp = await self.http.get("/v1/models")
            resp.raise_for_status()
        except httpx.HTTPError as exc:
            raise BenchError(f"endpoint {self.target.base_url} is not answering /v1/models: {exc!r}") from None
        served = [m.get("id") for m in resp.json().get("data", [])]
        if self.target.model not in served:
            raise BenchError(f"model {self.target.model!r} is not served at {self.target.base_url}; it serves {served}")
        # Before any request: a chat workload against a model without a chat template stops here, in one line.
        try:
            await self.count(user("ping"))
        except httpx.HTTPStatusError as exc:
            raise BenchError(self.protocol.refused(self.target.model, f"/tokenize: HTTP {exc.response.status_code} "
                                                   f"{_error_message(exc.response)}")) from None

    async def max_model_len(self) -> int | None:
        """The served model's context length as the server reports it (vLLM's /v1/models card)."""
        resp = await self.http.get("/v1/models")
        resp.raise_for_status()
        card: dict[str, Any] = next((m for m in resp.json().get("data", []) if m.get("id") == self.target.model), {})
        value = card.get("max_model_len")
        return int(value) if value is not None else None

    async def stream(self, index: int, prompt: Prompt, max_tokens: int,
                     request_id: str | None = None) -> tuple[RequestSample, Output]:
        """One streamed request, sent with `x-request-id: request_id`; returns its sample and output.

        Without a request_id (warm-up, probes) one unique to the namespace is made up.
        Never raises for request failures: they are samples with a status.
        """
        body = self.protocol.body(self.target.model, prompt, max_tokens, self.sampling)
        request_id = request_id or f"{self.target.namespace}/{uuid.uuid4().hex[:12]}"
        t0 = time.perf_counter()
        t_first: float | None = None
        t_last: float | None = None
        t_end: float | None = None  # the stream's end: parsing after it is not request time
        chunks = 0
        usage: dict[str, Any] | None = None
        parts: list[str] = []
        ids: list[int] = []
        gaps: list[float] = []
        spec: dict[str, Any] = {}

        def sample(status: str, error: str | None = None, kind: str | None = None) -> RequestSample:
            """The request's record; only a complete output (status ok) gets an output hash."""
            now = t_end or time.perf_counter()
            itl: dict[int, int] = {}
            for g in gaps:
                bucket = itl_bucket(g * 1000.0)
                itl[bucket] = itl.get(bucket, 0) + 1
            return RequestSample.model_validate(dict(
                index=index,
                request_id=request_id,
                prompt_tokens=prompt.tokens,
                status=status,
                error=error,
                error_kind=kind,
                completion_tokens=(usage or {}).get("completion_tokens"),
                chunks=chunks,
                started_s=t0,
                ttft_s=None if t_first is None else t_first - t0,
                e2e_s=now - t0,
                decode_s=None if t_first is None or t_last is None else t_last - t_first,
                arrival_groups=None if t_first is None else 1 + sum(g > ARRIVAL_GAP_S for g in gaps),
                max_tokens=prompt.max_tokens,
                itl_hist=itl or None,
                spec_steps=spec.get("num_spec_steps"),
                spec_accepted_tokens=spec.get("num_accepted_draft_tokens"),
                spec_draft_tokens=spec.get("num_draft_tokens"),
                spec_acceptance_histogram=spec.get("acceptance_histogram"),
                output_sha256=output_hash("".join(parts)) if status == "ok" else None,
            ))

        try:
            async with self.http.stream("POST", self.protocol.path, json=body,
                                        headers={"x-request-id": request_id}) as resp:
                if resp.status_code != 200:
                    text = (await resp.aread()).decode(errors="replace")[:200]
                    return sample("error", f"HTTP {resp.status_code}: {text}", f"http_{resp.status_code}"), ""
                # The hot path only stamps each read as it returns and keeps its bytes: splitting
                # events and parsing JSON wait until the stream ended, so no read is stamped late
                # because the previous one was still being parsed. Raw bytes: SSE is not compressed.
                reads = [(time.perf_counter(), data) async for data in resp.aiter_raw()]
            t_end = time.perf_counter()
            pending = b""
            for stamp, data in reads:
                # An event split over two reads is complete, and so stamped, with the second one.
                *events, pending = (pending + data).split(b"\n\n")
                for raw in events:
                    for line in raw.splitlines():
                        if not line.startswith(b"data:") or (payload := line[5:].strip()) == b"[DONE]":
                            continue
                        event = json.loads(payload)
                        if not isinstance(event, dict):
                            raise json.JSONDecodeError("an SSE event that is not a JSON object", payload.decode(), 0)
                        if event.get("usage"):
                            usage = event["usage"]
                            # vLLM --per-request-spec-decode-metrics: rides on the final usage chunk.
                            spec = (event.get("metrics") or {}).get("speculative_decoding") or {}
                        for choice in event.get("choices") or []:
                            text, token_ids = self.protocol.delta(choice)
                            if text or token_ids:
                                if t_last is not None:
                                    gaps.append(stamp - t_last)
                                t_last = stamp
                                t_first = t_first or stamp
                                chunks += 1
                                parts.append(text)
                                ids.extend(token_ids)
        except httpx.ReadTimeout:
            return sample("timeout", f"client timeout: no bytes for {self.workload.read_timeout_s}s "
                                     "(read_timeout_s); a client limit, not a server measurement", "timeout"), ""
        except httpx.ConnectTimeout as exc:
            # httpx-aiohttp reports a refused connection as a ConnectTimeout too: only a wait that long is one
            if time.perf_counter() - t0 < 0.9 * self.workload.connect_timeout_s:
                return sample("error", f"cannot connect: {exc}"[:200], "connection"), ""
            return sample("timeout", f"client timeout: no connection after {self.workload.connect_timeout_s}s "
                                     "(connect_timeout_s)", "timeout"), ""
        except json.JSONDecodeError as exc:
            return sample("error", f"malformed SSE event: {exc}"[:200], "bad_sse"), ""
        except (httpx.TransportError, httpx.StreamError) as exc:
            return sample("error", f"{type(exc).__name__}: {exc}"[:200], "connection"), ""
        except httpx.HTTPError as exc:
            return sample("error", f"{type(exc).__name__}: {exc}"[:200], "http"), ""
        if usage is None:
            return sample("error", "stream carried no usage; the server must honour stream_options.include_usage",
                          "no_usage"), ""
        if usage.get("completion_tokens") != max_tokens:
            return sample("error", f"completion_tokens {usage.get('completion_tokens')} != max_tokens {max_tokens} "
                                   "(server ignored ignore_eos/min_tokens)", "short"), ""
        return sample("ok"), ids or "".join(parts)
