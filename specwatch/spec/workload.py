"""`workload:` and `sampling:`: the cells each arm is measured in and how tokens are sampled."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, ValidationInfo, field_validator, model_validator

from specwatch.spec.base import MAX_REQUESTS, Concurrency, Requests, Seed, Strict, Tokens, cap, is_stored

# From this concurrency a closed-loop cell is "batched": a metric with a `batched` stand-in
# (analysis/metrics.py) is judged on it, and its requests are not paired (analysis/pairing.py), and the
# cell is sized in whole waves
# (`workload.batched_waves`). With many streams a request's rate is set by which other requests share
# its steps, which differs between the arms even for identical prompts, so pairing by prompt takes out
# little; the median of a 2-6 s cell's per-request rates swung +-20-50% between its eighths (issue 22,
# the shared H200 run). Aggregate throughput counts every token of the cell over its wall time: the
# capacity a batched deployment buys, with no per-request selection, and over the shared run's 3 rounds
# its per-round log-ratio was no noisier than the paired one (sd 0.29 vs 0.31 pooled over the c>=16
# cells; benchmarks/README.md section 11). Below it, and in open-loop rate cells (whose throughput is
# the offered rate, whatever the server), paired per-request rates are the better-estimated quantity.
BATCHED_CONCURRENCY = 16


def corpus_name(path: Path) -> str:
    """The prompt class a corpus's cells are keyed by."""
    return f"corpus:{path.stem}"


class RampUpSpec(Strict):
    """An open-loop cell whose rate rises linearly with the request index from start_rps to end_rps
    (vllm bench serve's --ramp-up-strategy linear)."""

    start_rps: PositiveFloat
    end_rps: PositiveFloat

    @model_validator(mode="after")
    def _rising(self) -> RampUpSpec:
        if self.end_rps <= self.start_rps:
            raise ValueError(f"end_rps {self.end_rps:g} <= start_rps {self.start_rps:g}: a ramp rises; "
                             "set end_rps above start_rps (a constant rate is a request_rates entry)")
        return self
class SloSpec(Strict):
    """Service-level objectives for goodput, in ms; any subset. A request meets the SLO when it is within all set."""

    ttft_ms: PositiveFloat | None = None
    tpot_ms: PositiveFloat | None = None
    e2e_ms: PositiveFloat | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_names(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name in data:
                if name not in cls.model_fields:
                    raise ValueError(f"unknown SLO {name!r}; the known SLOs are {', '.join(cls.model_fields)} "
                                     "(milliseconds)")
        return data


class WorkloadSpec(Strict):
    protocol: str = Field(default="completions", description="request protocol (specwatch.bench.protocols)")
    prompt_classes: Annotated[list[str], Field(min_length=1)] = ["code", "prose"]
    prompt_tokens: Annotated[Tokens, Field(ge=16)] = 128
    max_tokens: Annotated[Tokens, Field(ge=2)] = 64
    concurrency: list[Concurrency] = Field(default=[1, 4], description="closed-loop cells; [] with rates")
    request_rates: list[float] = Field(default=[], description="open-loop cells: requests/s, one cell each")
    arrival: Literal["poisson", "gamma"] = "poisson"
    burstiness: PositiveFloat = Field(default=1.0, description="gamma shape of the inter-arrival times (1 = Poisson)")
    ramp_up: RampUpSpec | None = Field(default=None, description="one more open-loop cell whose rate rises")
    max_concurrency: Concurrency | None = Field(
        default=None, description="open-loop cells: the most requests in flight; one over it waits (send lateness)")
    requests_per_cell: Annotated[Requests, Field(ge=1)] = 8
    min_waves: PositiveInt = Field(
        default=1, description="a closed-loop cell at concurrency c sends at least min_waves x c requests: with "
        "only c it is one burst, whose ramp is the whole cell and never a steady batch of c")
    # 16 whole waves: at 4 the last wave's drain was 12-26% of a c>=16 cell on the H200, and the window's
    # own noise in a round's log-ratio ~0.07-0.08; at 16 ~4% and ~0.03-0.04, below the +-5% band, for 10-16 s
    # per cell (benchmarks/README.md section 11). Waves, not seconds: a count from the file is the same for
    # every arm and round, whatever their speed.
    batched_waves: PositiveInt | None = Field(
        default=16, validate_default=True, description=f"a closed-loop cell at concurrency c >= "
        f"{BATCHED_CONCURRENCY} sends at least batched_waves x c requests, in whole waves of c; null = off "
        "(requests_per_cell and min_waves alone)")
    duration_s: PositiveFloat | None = Field(
        default=None, description="closed loop for this long per cell instead of requests_per_cell requests; "
        "one arm only (resolve.py says why)"
    )
    warmup_requests: Annotated[Requests, Field(ge=0)] = 2
    warmup_wave: bool = Field(
        default=True, description="before each closed-loop cell, one discarded wave of `concurrency` short requests "
        "at the cell's concurrency (bench/cell.py says why)")
    seed: Seed = 0
    connect_timeout_s: PositiveFloat = 10.0
    read_timeout_s: PositiveFloat = 300.0
    cell_deadline_s: PositiveFloat = Field(
        default=3600.0, description="a cell not finished this long after the one before it stops its arm (a server "
        "trickling bytes defeats read_timeout_s)")
    repetition_flag_ratio: Annotated[float, Field(gt=0, le=1)] = 0.5
    corpus: Path | None = Field(default=None, description="JSONL prompts (prompt or messages, optional "
                                "output_tokens) instead of prompt_classes; relative to the experiment file")
    nonce: bool = Field(default=True, description="false: send prompts as written (a prefix-cache study; the "
                        "prefix-cache gate is then off)")
    slo: SloSpec | None = Field(default=None, description="goodput objectives: ttft_ms, tpot_ms, e2e_ms")
    kv_poll_s: Annotated[float, Field(ge=1.0)] | None = Field(
        default=1.0, description="/metrics poll period for peak KV-cache usage (>= 1 s: polls cost the server); "
                                 "null = off")
    client_workers: PositiveInt | None = Field(
        default=None, description="client processes per cell; null = from the cell's concurrency (bench/fanout.py)"
    )
    # Picked by benchmarks/client_capacity.py (benchmarks/README.md, section 2).
    client_transport: str = Field(default="aiohttp-uvloop",
                                  description="what carries httpx's requests (bench/transports.py)")

    @property
    def classes(self) -> list[str]:
        """The prompt classes its cells are keyed by: the corpus's name, else prompt_classes."""
        return [corpus_name(self.corpus)] if self.corpus is not None else list(self.prompt_classes)

    def cell_requests(self, concurrency: int | None) -> int:
        """Requests in one cell: requests_per_cell, or min_waves x c if more (closed loop); from c >=
        BATCHED_CONCURRENCY at least batched_waves x c, rounded up to whole waves (a part wave only adds drain)."""
        requests = max(self.requests_per_cell, self.min_waves * (concurrency or 0))
        if self.batched_waves is None or concurrency is None or concurrency < BATCHED_CONCURRENCY:
            return requests
        return max(-(-requests // concurrency), self.batched_waves) * concurrency

    @property
    def max_streams(self) -> int:
        """The most requests any of its cells has in flight (an uncapped open loop: all of a cell's)."""
        open_loop = bool(self.request_rates or self.ramp_up)
        return max(*self.concurrency, self.max_concurrency or (self.requests_per_cell if open_loop else 0), 0)

    @field_validator("request_rates")
    @classmethod
    def _positive_rates(cls, rates: list[float]) -> list[float]:
        for rate in rates:
            if not (rate > 0 and math.isfinite(rate)):
                raise ValueError(f"rate {rate!r} is not a positive number of requests per second; fix: give rates "
                                 "above 0, e.g. [1, 2, 4], or leave request_rates out for closed-loop cells only")
        return rates

    @field_validator("client_workers")
    @classmethod
    def _workers_fit_cores(cls, workers: int | None, info: ValidationInfo) -> int | None:
        # Two client processes on one core stamp each other's chunks late: the client would
        # measure itself. A stored spec was checked where it ran, not on this machine.
        cores = len(os.sched_getaffinity(0))
        if workers is not None and workers > cores and not is_stored(info):
            raise ValueError(f"client_workers {workers} is more than the {cores} cores this process may use "
                             f"(os.sched_getaffinity); set client_workers <= {cores} or leave it unset (auto)")
        return workers

    @field_validator("batched_waves")
    @classmethod
    def _waves_fit_the_cap(cls, waves: int | None, info: ValidationInfo) -> int | None:
        top = max((c for c in info.data.get("concurrency", []) if c >= BATCHED_CONCURRENCY), default=0)
        if waves is not None and waves * top > MAX_REQUESTS:
            raise ValueError(f"{waves} waves at concurrency {top} is {waves * top:,} requests, over specwatch's cap "
                             f"of {MAX_REQUESTS:,} per cell; fix: use at most {MAX_REQUESTS // top:,} waves")
        return waves

    @model_validator(mode="after")
    def _enough_requests(self) -> WorkloadSpec:
        if not (self.concurrency or self.request_rates or self.ramp_up):
            raise ValueError("no cells: give concurrency levels (closed loop), request_rates (open loop) or ramp_up")
        if self.arrival == "poisson" and self.burstiness != 1.0:
            raise ValueError(f"burstiness {self.burstiness:g} needs arrival: gamma (Poisson arrivals have "
                             "burstiness 1); set arrival: gamma or drop burstiness")
        # With min_waves > 1 a closed-loop cell sends min_waves x c requests whatever requests_per_cell says,
        # and so does a batched cell (batched_waves x c): requests_per_cell sizes the other cells alone.
        top = max((c for c in self.concurrency
                   if self.batched_waves is None or c < BATCHED_CONCURRENCY), default=1)
        if self.requests_per_cell < top and self.min_waves == 1:
            raise ValueError(
                f"requests_per_cell {self.requests_per_cell} < concurrency {top}: the cell could never reach "
                f"its concurrency; set requests_per_cell >= {top}, or min_waves >= 2 (each cell at c then "
                "sends at least min_waves x c)"
            )
        return self


class SamplingSpec(Strict):
    """Pinned and recorded. Greedy by default: acceptance under random sampling on a small model is noise."""

    temperature: Annotated[float, Field(ge=0)] = 0.0
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    top_k: Annotated[int, Field(ge=-1), cap(1 << 20, "the largest published vocabularies have ~256k")] = -1
    seed: Seed | None = 0

