"""`thresholds:` and `verdict:`: the gates a cell must pass and the rule the experiment is judged by."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, PositiveFloat, field_validator

from specwatch.spec.base import Concurrency, Strict


class Thresholds(Strict):
    noise_band: Annotated[float, Field(gt=0, lt=1)] = 0.05
    max_prefix_cache_hit_rate: Annotated[float, Field(ge=0, le=1)] = 0.01
    # "client saturated" gate (bench/selfcheck.py); defaults from benchmarks/client_capacity.py,
    # where decode-rate drift against server truth starts (benchmarks/README.md, section 2).
    client_loop_lag_ms: PositiveFloat = 20.0
    client_cpu_share: Annotated[float, Field(gt=0, le=1)] = 0.9
    client_send_lateness_ms: PositiveFloat = 10.0
    # A cell with more than this share of failed requests is rejected; 0: any failure rejects it
    # (measurement rule 10: a cell with errors is not a measurement). Below it the failures are a flag.
    max_failed_share: Annotated[float, Field(ge=0, lt=1)] = 0.0
    # A closed-loop cell counts as having reached concurrency c when the running-requests gauge peaked
    # at >= this share of c (rounded up). The gauge is sampled, and in a closed loop a slot is empty
    # between one request's last token and the next one's admission: on an H200 with ~1 ms steps a
    # c=64 cell peaked at 61-64 in 7 of 8 launches (benchmarks/README.md section 7). A server that
    # caps or queues the batch (max_num_seqs, KV cache) stays far below.
    min_running_share: Annotated[float, Field(gt=0, le=1)] = 0.9
    # Interference (engine/hostload.py, docs/measurement.md "Interference"): a cell during which processes
    # outside the run used more than `host_foreign_cpu` of the host's cores, or the hypervisor stole more
    # than `host_steal` of them, or another process computed on the arm's GPU, is contaminated: its launch
    # runs again in the same round (design.max_redos). benchmarks/host_load.py prints the per-cell share on a
    # quiet host and beside N busy loops (benchmarks/README.md, section 17).
    host_foreign_cpu: Annotated[float, Field(gt=0, le=1)] = 0.15
    host_steal: Annotated[float, Field(gt=0, le=1)] = 0.1



class VerdictSpec(Strict):
    """The experiment verdict rule (defaults follow the seed proposal)."""

    tail_floor: Annotated[float, Field(ge=0, le=1)] = 0.2
    require_gain: bool = True
    concurrency: list[Concurrency] | None = Field(default=None, description="declared cells; default: all")
    request_rates: list[PositiveFloat] | None = Field(default=None, description="declared rate cells; default: all")
    metrics: Annotated[list[str], Field(min_length=1)] = Field(
        default=["decode_tok_s"], description="judged metrics (specwatch.analysis.metrics); the first must gain")

    @field_validator("metrics")
    @classmethod
    def _each_once(cls, names: list[str]) -> list[str]:
        if len(set(names)) != len(names):
            raise ValueError(f"{names} names a metric twice; fix: list each once")
        return names


