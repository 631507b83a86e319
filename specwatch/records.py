"""Plain data passed between stages and written to the run dir as JSON (`results.json`).

Derived figures are `computed_field`s so they are defined in one place and travel
with the record into JSON and DuckDB. `results.json` is a versioned contract: reading it
back recomputes the derived keys and rejects any other key it does not know.
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, computed_field, model_validator

from specwatch.cmdline import flag_value
from specwatch.spec import SloSpec

# Chunks closer together than this arrived in the same read: one "arrival group". No real
# decode step is this short.
ARRIVAL_GAP_S = 0.001
# A stream whose chunks came in fewer groups than this share of its chunks was buffered and
# delivered in bursts (seen on vLLM's API server when steps take ~3 ms on a 2-core host).
# Some servers send two events per step (pairs), so the share is well below one half.
MIN_GROUP_SHARE = 0.25
# A cell keeps its decode figures while at most this share of its streams arrived in bursts.
MAX_COALESCED_SHARE = 0.25


# A p99 over fewer requests than this is None, not the maximum: with n < 100 the "99th
# percentile" is an interpolation of the top two samples, i.e. the max in disguise.
MIN_P99_REQUESTS = 100
P99 = 0.99
# Chunk gaps (ITL) are kept per request as a histogram of log-spaced buckets, each this much
# wider than the one below (1%): mergeable across requests, and a cell's ITL percentile comes
# out within half a bucket (0.5%) of the exact one, without storing every gap.
ITL_BUCKET_RATIO = 1.01
ITL_FLOOR_MS = 0.001  # gaps below 1 us (chunks of one read) share the lowest bucket

RESULTS_SCHEMA_VERSION: Literal[5] = 5
LoadMode = Literal["closed", "rate"]


class _Record(BaseModel):
    # Unknown keys are an error: a misspelt or newer field must not vanish silently. Computed
    # fields are written into results.json too; they are derived, so they are dropped on the
    # way back in and recomputed.
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _drop_derived(cls, data: Any) -> Any:
        if isinstance(data, dict) and cls.model_computed_fields:
            return {k: v for k, v in data.items() if k not in cls.model_computed_fields}
        return data


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def _quantile(values: list[float], q: float) -> float | None:
    """Linear-interpolated quantile (numpy's default method); None for an empty list."""
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def load_level(concurrency: int | None = None, rate: float | None = None, ramp_from: float | None = None) -> str:
    """A cell's load level as text: `c=4` (closed loop), `r=2.5/s` (a rate), `r=1-8/s` (a ramp)."""
    if concurrency is not None:
        return f"c={concurrency}"
    return f"r={rate:g}/s" if ramp_from is None else f"r={ramp_from:g}-{rate:g}/s"
def itl_bucket(gap_ms: float) -> int:
    return math.floor(math.log(max(gap_ms, ITL_FLOOR_MS)) / math.log(ITL_BUCKET_RATIO))


def bucket_ms(bucket: int) -> float:
    """A bucket's representative value: its geometric midpoint."""
    return float(ITL_BUCKET_RATIO ** (bucket + 0.5))


def _hist_quantile(hist: dict[int, int], q: float) -> float | None:
    """The q-quantile of a merged bucket histogram (nearest rank), as the bucket's midpoint."""
    total = sum(hist.values())
    if not total:
        return None
    rank = q * (total - 1)
    seen = 0
    for bucket in sorted(hist):
        seen += hist[bucket]
        if seen > rank:
            return bucket_ms(bucket)
    return bucket_ms(max(hist))


class CellKey(BaseModel):
    """What names a cell everywhere: records, SQL (`cell` column), verdict and report.

    A closed-loop cell holds `concurrency` streams in flight; an open-loop (`rate`) cell sends
    requests at `rate` per second, or, with `ramp_from`, at a rate rising from `ramp_from` to
    `rate` over the cell. `prompt_tokens` is the calibrated prompt length, which is also the
    context depth of a sweep point.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    load: LoadMode = "closed"
    concurrency: int | None = None
    rate: float | None = None
    ramp_from: float | None = None
    prompt_class: str
    prompt_tokens: int

    @model_validator(mode="after")
    def _level(self) -> CellKey:
        if (self.load == "closed") != (self.concurrency is not None) or (self.load == "rate") != (
                self.rate is not None) or (self.ramp_from is not None and self.load != "rate"):
            raise ValueError("a closed-loop cell has a concurrency and no rate; a rate cell has a rate "
                             "(and a ramp_from when its rate rises) only")
        return self

    @property
    def id(self) -> str:
        """Stable text form, stored in every table's `cell` column: `closed/c4/code/p128`,
        `rate/r2.5/code/p128`, a ramp from 1 to 8 requests/s `rate/r1to8/code/p128`."""
        if self.load == "closed":
            level = f"c{self.concurrency}"
        else:
            level = f"r{self.rate:g}" if self.ramp_from is None else f"r{self.ramp_from:g}to{self.rate:g}"
        return f"{self.load}/{level}/{self.prompt_class}/p{self.prompt_tokens}"

    @property
    def level(self) -> str:
        """The load level alone, as the verdict declares and reports it: `c=4`, `r=2.5/s`, `r=1-8/s`."""
        return load_level(self.concurrency, self.rate, self.ramp_from)

    @property
    def label(self) -> str:
        """Short human form for tables and logs: `c=4 code` (`r=2.5/s code` for rate cells)."""
        return f"{self.level} {self.prompt_class}"

    def sort_key(self) -> tuple[str, float, float, str, int]:
        return (self.load, float(self.concurrency or self.rate or 0), self.ramp_from or 0.0, self.prompt_class,
                self.prompt_tokens)


class ImageRef(_Record):
    name: str
    backend: str
    package: str | None = None
    vllm_version: str | None = None
    digest: str | None = None
    python: Path | None = None
    url: str | None = None
    ref: str | None = None  # a container image: the reference containers are run from
    build_log: Path | None = None
    build_s: float = 0.0
    reused: bool = False


class ModelSource(_Record):
    """Where a packaged model's checkpoint came from (model.package): the GGUF file, its license
    and the conversion; for an early-exit draft also how many of the model's layers it keeps."""

    package: str
    gguf_file: str
    gguf_sha256: str
    license: str | None = None
    transformers: str
    gguf: str
    accelerate: str
    key: str
    draft_layers: int | None = None


class CheckpointFacts(_Record):
    path: Path
    config_sha256: str
    index_sha256: str | None = None
    architectures: list[str] = []
    model_type: str | None = None
    max_position_embeddings: int | None = None
    dspark_block_size: int | None = None
    num_nextn_predict_layers: int | None = None
    shards: int = 0
    source: ModelSource | None = None
    draft: CheckpointFacts | None = None  # model.draft_layers: the early-exit draft written beside it
    # config.json's and generation_config.json's eos_token_id: where an output's answer ends
    eos_token_ids: list[int] = []


class SpecWindow(_Record):
    """Counter deltas over one cell's window (after - before); None when the server has no such counter."""

    num_drafts: float | None = None
    num_draft_tokens: float | None = None
    num_accepted_tokens: float | None = None
    accepted_per_position: list[float] | None = None
    generation_tokens: float | None = None
    server_prompt_tokens: float | None = None
    prefix_cache_hits: float | None = None
    prefix_cache_queries: float | None = None
    preemptions: float | None = None

    @computed_field
    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted/drafts: includes the bonus token."""
        r = _ratio(self.num_accepted_tokens, self.num_drafts)
        return None if r is None else 1.0 + r

    @computed_field
    @property
    def draft_acceptance_rate(self) -> float | None:
        return _ratio(self.num_accepted_tokens, self.num_draft_tokens)

    @computed_field
    @property
    def acceptance_per_position(self) -> list[float] | None:
        if self.accepted_per_position is None or not self.num_drafts:
            return None
        return [a / self.num_drafts for a in self.accepted_per_position]

    @computed_field
    @property
    def prefix_cache_hit_rate(self) -> float | None:
        if self.prefix_cache_queries is None:
            return None
        return _ratio(self.prefix_cache_hits or 0.0, self.prefix_cache_queries) or 0.0


class RequestSample(_Record):
    index: int
    request_id: str | None = None  # the x-request-id header sent: joins the sample with server logs
    prompt_tokens: int
    status: Literal["ok", "error", "timeout"]
    error: str | None = None
    # The failure's class, counted per cell: http_<code>, timeout, connection, bad_sse, no_usage, short.
    error_kind: str | None = None
    completion_tokens: int | None = None
    chunks: int = 0
    started_s: float = 0.0
    scheduled_s: float | None = None  # open loop: the planned send time, on started_s's clock and origin
    ttft_s: float | None = None
    e2e_s: float | None = None
    decode_s: float | None = None
    arrival_groups: int | None = None
    repetition_ratio: float | None = None  # of the output before its first EOS (analysis/loops.py)
    # Output tokens before the first end-of-sequence token (all of them without one); None where the
    # checkpoint's EOS ids are not known (an endpoint's model) or the output was not read.
    pre_eos_tokens: int | None = None
    max_tokens: int | None = None  # the request's own output length (a corpus line's); None: the cell's
    # Gaps between successive content chunks (ITL, docs/measurement.md "Latency percentiles"), as
    # {itl_bucket(gap_ms): count}; None before the second chunk.
    itl_hist: dict[int, int] | None = None
    # The server's own per-request speculative figures (`metrics.speculative_decoding` of the
    # final usage chunk, vLLM --per-request-spec-decode-metrics); None when it sends none.
    spec_steps: int | None = None
    spec_accepted_tokens: int | None = None
    spec_draft_tokens: int | None = None
    spec_acceptance_histogram: list[int] | None = None  # verify steps by accepted draft tokens j = 0..k
    # sha256 of the output text, 16 hex digits (bench.client.output_hash); None unless status is ok. The arms
    # of a round send the same prompt at each index (engine/namespaces.py): equal hashes, equal outputs.
    output_sha256: str | None = None
    # Sweep runs only (flows/sweep.py): one stream at a time, so a /metrics window around each request
    # is that request's own acceptance; the prompt's own repetition; the loop detector's verdict.
    window_drafts: float | None = None
    window_accepted_tokens: float | None = None
    window_accepted_per_position: list[float] | None = None
    prompt_repetition_ratio: float | None = None
    loop_detected: bool | None = None

    @property
    def coalesced(self) -> bool:
        """Tokens arrived in one burst: the server buffered the stream, so its timing says nothing."""
        return (
            self.status == "ok"
            and self.arrival_groups is not None
            and self.chunks >= 4
            and self.arrival_groups < max(2.0, MIN_GROUP_SHARE * self.chunks)
        )

    @computed_field
    @property
    def send_lateness_s(self) -> float | None:
        """How late the request left against its plan (open loop): started_s - scheduled_s."""
        return None if self.scheduled_s is None else self.started_s - self.scheduled_s

    @computed_field
    @property
    def decode_tok_s(self) -> float | None:
        """(completion_tokens - 1) / (t_last - t_first): the first token belongs to TTFT.

        None for a stream that arrived in one burst: it carries no per-token timing.
        """
        if self.completion_tokens is None or self.completion_tokens < 2 or not self.decode_s or self.coalesced:
            return None
        return (self.completion_tokens - 1) / self.decode_s

    @computed_field
    @property
    def tpot_ms(self) -> float | None:
        """Time per output token after the first: 1000 * (t_last - t_first) / (completion_tokens - 1)."""
        rate = self.decode_tok_s
        return None if not rate else 1000.0 / rate

    @computed_field
    @property
    def spec_mean_acceptance_length(self) -> float | None:
        """1 + accepted / verify steps, this request only (includes the bonus token)."""
        r = _ratio(self.spec_accepted_tokens, self.spec_steps)
        return None if r is None else 1.0 + r

    @computed_field
    @property
    def spec_draft_acceptance_rate(self) -> float | None:
        return _ratio(self.spec_accepted_tokens, self.spec_draft_tokens)

    def meets(self, slo: SloSpec) -> bool:
        """An ok request within every declared limit; a figure it lacks (e.g. a burst stream's TPOT) fails it."""
        if self.status != "ok":
            return False
        figures = {"ttft_ms": self.ttft_s and self.ttft_s * 1000.0, "tpot_ms": self.tpot_ms,
                   "e2e_ms": self.e2e_s and self.e2e_s * 1000.0}
        return all((v := figures[name]) is not None and v <= limit
                   for name, limit in slo.model_dump(exclude_none=True).items())


SLO_NAMES = tuple(SloSpec.model_fields)


class ClientCheck(_Record):
    """The client's own lag over one cell, merged over its worker processes (bench/selfcheck.py).

    Quantiles are over the samples of all workers together; CPU share is the busiest worker's.
    """

    workers: int
    transport: str
    loop_lag_ms_p50: float | None = None  # a sleeper's lateness on each worker's event loop
    loop_lag_ms_p99: float | None = None
    loop_lag_ms_max: float | None = None
    stamp_delay_ms_p99: float | None = None  # a byte readable on a socket -> the loop's coroutine stamps it
    cpu_share_max: float | None = None  # process CPU time / wall, the busiest worker
    send_lateness_ms_p99: float | None = None  # open loop: sent after the planned time by this much


class ForeignProcess(_Record):
    """A process outside the run (neither an arm's server nor the client) and what it used over a cell."""

    pid: int  # its busiest process
    name: str  # the program and its first arguments, secrets redacted (specwatch.redact)
    cores: float  # CPU seconds over the cell's window / its wall time, all its processes together
    processes: int = 1  # processes running the same program (make -j, N busy loops), summed


class HostLoad(_Record):
    """What the host did besides the run over one cell's window (engine/hostload.py): interference.

    CPU figures are shares of the host's cores; None where the host does not report them (no PSI).
    GPU figures are over the GPUs the arm's server holds; `gpu_error` says why they were not measured.
    """

    window_s: float  # the sampled span that covers the cell (samples every SAMPLE_S, so a little wider)
    foreign_cpu: float  # CPU time of processes outside the run / (window x cores)
    steal: float | None = None  # time the hypervisor gave this VM's CPUs to others / (window x cores)
    cpu_pressure: float | None = None  # /proc/pressure/cpu "some": share of the window some task waited for a CPU
    top: list[ForeignProcess] = []  # the busiest foreign processes, busiest first
    gpu_foreign_processes: int | None = None  # compute processes on the arm's GPUs that are not the run's
    gpu_foreign_memory_mib: float | None = None
    gpu_sm_clock_ratio: float | None = None  # the lowest SM clock sampled / its maximum
    gpu_throttle: list[str] = []  # NVML's clock event reasons seen in the window (thermal, power, ...)
    gpu_error: str | None = None  # "not measured: ..." (no NVML, no GPU)


class CellResult(_Record):
    load_mode: LoadMode = "closed"
    concurrency: int | None = None  # closed loop only
    request_rate: float | None = None  # rate cells: the asked rate (a ramp's end rate), requests/s
    ramp_from_rate: float | None = None  # a ramp's start rate
    arrival: str | None = None  # rate cells: the inter-arrival law (poisson, gamma)
    burstiness: float | None = None  # rate cells: the gamma shape (1 = Poisson)
    max_concurrency: int | None = None  # rate cells: the in-flight cap, if any
    prompt_class: str
    prompt_tokens: int
    max_tokens: int
    wall_s: float
    window: SpecWindow
    max_running_observed: int | None = None
    # Peak of vllm:kv_cache_usage_perc (a 0..1 share) over the polls taken while the cell ran.
    kv_cache_usage_peak: float | None = None
    kv_cache_polls: int = 0
    slo: SloSpec | None = None
    requests: list[RequestSample]
    rejected: bool = False
    reject_reason: str | None = None
    flags: list[str] = []
    # False where requests share prefixes on purpose (multi-turn classes, workload.nonce: false):
    # the window's prefix-cache hit rate is then reported, not gated.
    prefix_cache_gate: bool = True
    client: ClientCheck | None = None
    counters_error: str | None = None  # why the window has no counters (/metrics failed or did not parse)
    depth: int | None = None  # a sweep point's context depth (flows/sweep.py); None for A/B cells
    skip_reason: str | None = None  # a sweep depth that was not run (it does not fit the server), and why
    opened_at: float | None = None  # Unix time the cell's window opened (its wall_s follows): host load's window
    host: HostLoad | None = None  # interference over the window; None: not sampled (older runs, endpoints)
    contaminated: str | None = None  # why the host was too busy for the cell to count (thresholds.host_*)

    @computed_field
    @property
    def loop_detected(self) -> bool | None:
        """Any of the cell's runs fell into a repetition loop; None where no run was judged (A/B cells)."""
        judged = [r.loop_detected for r in self.requests if r.loop_detected is not None]
        return any(judged) if judged else None

    @property
    def key(self) -> CellKey:
        return CellKey(load=self.load_mode, concurrency=self.concurrency if self.load_mode == "closed" else None,
                       rate=self.request_rate, ramp_from=self.ramp_from_rate, prompt_class=self.prompt_class,
                       prompt_tokens=self.prompt_tokens)

    @computed_field
    @property
    def cell(self) -> str:
        return self.key.id

    def _ok(self) -> list[RequestSample]:
        return [r for r in self.requests if r.status == "ok"]

    def _values(self, attr: str) -> list[float]:
        return [v for r in self._ok() if (v := getattr(r, attr)) is not None]

    @computed_field
    @property
    def requests_ok(self) -> int:
        return len(self._ok())

    @computed_field
    @property
    def requests_failed(self) -> int:
        return len(self.requests) - len(self._ok())

    @property
    def failures_by_kind(self) -> dict[str, int]:
        """Failed requests per failure class (RequestSample.error_kind), most frequent first."""
        counts: dict[str, int] = {}
        for r in self.requests:
            if r.status != "ok":
                kind = r.error_kind or r.status
                counts[kind] = counts.get(kind, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))

    @computed_field
    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens or 0 for r in self._ok())

    @computed_field
    @property
    def decode_tok_s_median(self) -> float | None:
        return _quantile(self._values("decode_tok_s"), 0.5)

    @computed_field
    @property
    def decode_tok_s_p10(self) -> float | None:
        return _quantile(self._values("decode_tok_s"), 0.1)

    @computed_field
    @property
    def decode_tok_s_p90(self) -> float | None:
        return _quantile(self._values("decode_tok_s"), 0.9)

    @computed_field
    @property
    def ttft_s_median(self) -> float | None:
        return _quantile(self._values("ttft_s"), 0.5)

    @computed_field
    @property
    def ttft_s_p90(self) -> float | None:
        return _quantile(self._values("ttft_s"), 0.9)

    @computed_field
    @property
    def tpot_ms_median(self) -> float | None:
        """Time per output token after the first, per request: 1000 / decode tok/s."""
        return _quantile([1000.0 / v for v in self._values("decode_tok_s") if v > 0], 0.5)

    @computed_field
    @property
    def e2e_s_median(self) -> float | None:
        return _quantile(self._values("e2e_s"), 0.5)

    def _ms_quantile(self, attr: str, q: float, scale: float = 1.0) -> float | None:
        if q >= P99 and self.requests_ok < MIN_P99_REQUESTS:
            return None
        return _quantile([v * scale for v in self._values(attr)], q)

    def _itl_quantile(self, q: float) -> float | None:
        # ITL pools every chunk gap of the cell, but a p99 still needs MIN_P99_REQUESTS
        # requests: the gaps of one stream are not independent, so many gaps of few
        # requests say little about the tail.
        hists = [r.itl_hist for r in self._ok() if r.itl_hist]
        if q >= P99 and len(hists) < MIN_P99_REQUESTS:
            return None
        merged: dict[int, int] = {}
        for h in hists:
            for bucket, n in h.items():
                merged[bucket] = merged.get(bucket, 0) + n
        return _hist_quantile(merged, q)

    @computed_field
    @property
    def ttft_ms_p50(self) -> float | None:
        return self._ms_quantile("ttft_s", 0.5, 1000.0)

    @computed_field
    @property
    def ttft_ms_p90(self) -> float | None:
        return self._ms_quantile("ttft_s", 0.9, 1000.0)

    @computed_field
    @property
    def ttft_ms_p99(self) -> float | None:
        return self._ms_quantile("ttft_s", P99, 1000.0)

    @computed_field
    @property
    def tpot_ms_p50(self) -> float | None:
        return self._ms_quantile("tpot_ms", 0.5)

    @computed_field
    @property
    def tpot_ms_p90(self) -> float | None:
        return self._ms_quantile("tpot_ms", 0.9)

    @computed_field
    @property
    def tpot_ms_p99(self) -> float | None:
        return self._ms_quantile("tpot_ms", P99)

    @computed_field
    @property
    def itl_ms_p50(self) -> float | None:
        return self._itl_quantile(0.5)

    @computed_field
    @property
    def itl_ms_p90(self) -> float | None:
        return self._itl_quantile(0.9)

    @computed_field
    @property
    def itl_ms_p99(self) -> float | None:
        return self._itl_quantile(P99)

    @computed_field
    @property
    def e2e_ms_p50(self) -> float | None:
        return self._ms_quantile("e2e_s", 0.5, 1000.0)

    @computed_field
    @property
    def e2e_ms_p90(self) -> float | None:
        return self._ms_quantile("e2e_s", 0.9, 1000.0)

    @computed_field
    @property
    def e2e_ms_p99(self) -> float | None:
        return self._ms_quantile("e2e_s", P99, 1000.0)

    def _good(self) -> list[RequestSample]:
        slo = self.slo
        return [] if slo is None else [r for r in self.requests if r.meets(slo)]

    @computed_field
    @property
    def goodput_requests(self) -> int | None:
        """Requests that met every SLO; None without an SLO."""
        return None if self.slo is None else len(self._good())

    @computed_field
    @property
    def goodput_share(self) -> float | None:
        """Share of all the cell's requests (failed ones included) that met every SLO; None without an SLO."""
        if self.slo is None or not self.requests:
            return None
        return len(self._good()) / len(self.requests)

    @computed_field
    @property
    def goodput_tok_s(self) -> float | None:
        """Completion tokens of the requests that met every SLO, over the cell's wall time."""
        if self.slo is None:
            return None
        return _ratio(float(sum(r.completion_tokens or 0 for r in self._good())), self.wall_s)

    @computed_field
    @property
    def aggregate_tok_s(self) -> float | None:
        """Sum of completion tokens over the cell's wall time."""
        return _ratio(float(self.completion_tokens), self.wall_s)

    @computed_field
    @property
    def achieved_rate(self) -> float | None:
        """Rate cells: requests sent per second, (sent - 1) / (last send - first send) over every sent
        request (failed ones too); equals the asked rate when each request left at its planned time."""
        starts = [r.started_s for r in self.requests]
        if self.load_mode != "rate" or len(starts) < 2:
            return None
        return _ratio(len(starts) - 1.0, max(starts) - min(starts))

    @computed_field
    @property
    def server_aggregate_tok_s(self) -> float | None:
        """The server's own generation-token delta over the same window."""
        return _ratio(self.window.generation_tokens, self.wall_s)

    @computed_field
    @property
    def repetition_ratio_median(self) -> float | None:
        return _quantile(self._values("repetition_ratio"), 0.5)

    def summary(self) -> dict[str, Any]:
        """The cell as one flat row: its own figures plus the counter window's (no per-request detail)."""
        window = self.window.model_dump(exclude={"accepted_per_position"})
        window = self.window.model_dump(exclude={"accepted_per_position"})
        slo = {f"slo_{k}": v for k, v in (self.slo or SloSpec()).model_dump().items()}
        # the client check as client_* columns (sql/migrations/008_client_check.sql)
        client = {f"client_{name}": getattr(self.client, name, None) for name in ClientCheck.model_fields}
        return {**self.model_dump(exclude={"requests", "window", "slo", "client", "host"}), **window, **slo, **client}


class RankRecord(_Record):
    """One rank of a multi-rank launch (provenance: where it ran, with what, its env's hash)."""

    rank: int
    role: Literal["head", "worker"]
    host: str
    address: str
    argv: list[str] = []
    env: dict[str, str] = {}  # redacted
    env_hash: str | None = None  # over the rendered env, secrets included: equal hashes, equal env
    log_path: Path | None = None
    gpu: str | None = None  # the GPUs the rank was given (its CUDA_VISIBLE_DEVICES)


class LaunchRecord(_Record):
    launcher: str
    base_url: str
    argv: list[str] = []
    env: dict[str, str] = {}
    log_path: Path | None = None
    boot_s: float | None = None
    k_confirmed: int | None = None
    k_source: Literal["boot_log", "metrics"] | None = None
    # KV-cache capacity in tokens, from vllm:cache_config_info's labels, else the boot log's
    # "KV cache size: N tokens" line.
    kv_cache_tokens: int | None = None
    kv_cache_source: Literal["metrics", "boot_log"] | None = None
    ranks: list[RankRecord] = []
    client_cores: list[int] | None = None  # the cores the client measured from (engine/placement.py); None: any

    # The server's batch and memory limits, as its command line set them (a GPU platform always
    # sets both: specwatch.engine.platforms); None = the vLLM build's own default.
    @computed_field
    @property
    def gpu_memory_utilization(self) -> float | None:
        value = flag_value(self.argv, "--gpu-memory-utilization")
        return None if value is None else float(value)

    @computed_field
    @property
    def max_num_seqs(self) -> int | None:
        value = flag_value(self.argv, "--max-num-seqs")
        return None if value is None else int(value)


class ArmResult(_Record):
    name: str
    round: int = 1
    image: str
    method: str | None = None
    k: int | None = None
    k_requested: int | None = None
    fallback_reason: str | None = None
    status: Literal["ok", "failed", "refused"]
    reason: str | None = None
    boot_exit: bool = False
    probes: list[list[int]] | None = None
    image_ref: ImageRef | None = None
    launch: LaunchRecord | None = None
    cells: list[CellResult] = []
    started_at: datetime
    ended_at: datetime
    # Written while the launch runs, so that a killed flow's results.json keeps its finished cells;
    # `specwatch run --resume` runs such a launch again, whole.
    in_progress: bool = False


class QualityRecord(_Record):
    arm: str
    round: int | None = 1  # None: a check over all rounds
    cell: str | None = None  # CellKey.id; None: a check over the whole arm
    concurrency: int | None = None
    prompt_class: str | None = None
    check: str
    metric: str
    value: float | None = None
    baseline_value: float | None = None
    threshold: float | None = None
    passed: bool
    severity: Literal["invalid", "regression"]
    detail: str = ""


class HostFacts(_Record):
    hostname: str
    platform: str
    python: str
    cpu_model: str | None = None
    cpu_count: int | None = None
    gpu_model: str | None = None
    gpu_count: int = 0
    gpu_driver: str | None = None
    gpu_memory_mib: float | None = None  # per GPU (the first's, as nvidia-smi's memory.total reports it)


class Provenance(_Record):
    specwatch_version: str
    host: HostFacts
    experiment_file: str | None = None
    experiment_sha256: str | None = None


class RecordedPrior(_Record):
    """A stored launch variance a run's looks read (store/priors.py): kept with the run, so that its
    verdict is judged again on what it read, whatever calibrations are stored later."""

    cell: str  # a cell id, or the composite's reserved name
    metric: str
    sd: float
    df: int
    source: str


class Redo(_Record):
    """A launch measured while the host was busy, and run again in the same round (engine/experiment.py)."""

    arm: str
    round: int
    reason: str  # the contaminated cells and what was busy
    launch: ArmResult  # the launch as it was measured; no figure of it is read


class RunResult(_Record):
    schema_version: Literal[5] = RESULTS_SCHEMA_VERSION
    run_id: str
    flow_run_id: str | None = None
    experiment_name: str
    experiment: dict[str, Any]
    provenance: Provenance
    checkpoint: CheckpointFacts | None = None
    # The stored variances the run's looks read, looked up before its first launch; None: recorded before
    # runs kept them (the table's are looked up again then).
    variance_priors: list[RecordedPrior] | None = None
    arms: list[ArmResult] = []
    quality: list[QualityRecord] = []
    started_at: datetime
    ended_at: datetime | None = None
    # What cut the run short (Ctrl-C, cancellation, SIGTERM, a host that stayed busy): stored as a partial run.
    interrupted: str | None = None
    redos: list[Redo] = []  # launches run again because the host was busy, in the order they happened

    @property
    def partial(self) -> bool:
        return self.interrupted is not None

    @property
    def regression_flagged(self) -> bool:
        return any(q.severity == "regression" and not q.passed for q in self.quality)

    @property
    def incomplete(self) -> bool:
        """An arm failed or a cell was rejected/invalid: the run is a partial answer."""
        return (
            self.partial
            or any(a.status != "ok" for a in self.arms)
            or any(c.rejected for a in self.arms for c in a.cells)
            or any(q.severity == "invalid" and not q.passed for q in self.quality)
        )

    def exit_code(self) -> int:
        """0 clean, 3 regression flagged, 4 an arm failed or cells were rejected (CLI contract)."""
        if self.regression_flagged:
            return 3
        return 4 if self.incomplete else 0
