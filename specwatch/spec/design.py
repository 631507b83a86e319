"""`design:`: the rounds (one launch of each arm each), the sequential decision's error, the variable under
test, the correctness probes."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PositiveInt, model_validator

from specwatch.design import VARIABLES
from specwatch.spec.base import Requests, Strict, Tokens, cap

# each round is a server launch per arm, minutes each
_ROUNDS = cap(1000, "a round is a server launch per arm")

# The keys issue 22 renamed (a round was called a block): old name -> new name. An experiment file that
# still writes an old one is told the new name with its value (spec/load.py), not only that the key is unknown.
RENAMED = {"blocks": "rounds", "max_blocks": "max_rounds"}


class DesignSpec(Strict):
    """How the arms are run: the rounds, the variable under test, the correctness probes."""

    # A round is one launch of each arm. `rounds` is the minimum before the first look, and with
    # `adaptive` the looks add a round while the sequential decision is undecided, up to `max_rounds`.
    # `adaptive` stays the switch: without it a run is exactly `rounds` rounds, one look spending the
    # whole alpha (a fixed cost, what CI and `make demo` want); `max_rounds` alone does not add rounds.
    rounds: Annotated[PositiveInt, _ROUNDS] = Field(default=3, description="rounds (launches per arm); the minimum "
                                                    "before a look; >= 3 unless a stored variance is used")
    max_rounds: Annotated[PositiveInt, _ROUNDS] | None = Field(default=None, description="adaptive: the most rounds")
    adaptive: bool = False
    alpha: float = Field(default=0.05, description="one-sided error of each call (PROMOTE, REVERT, NO CHANGE), "
                                                   "spent over the looks")
    varies: list[str] | None = Field(default=None, description="k, image, method, args, launcher, env or env:NAME")
    allow_confounded: bool = False
    probes: Annotated[Requests, Field(ge=0)] = Field(default=4, description="greedy probe prompts per arm; 0 = off")
    probe_tokens: Annotated[Tokens, Field(ge=2)] = 32
    cpu_share: Literal["cores", "nice"] = Field(
        default="cores", description="how a CPU server on this machine shares it with the client: cores (the "
                                     "engine on cores 1..n-1, the client on core 0) or nice (the server at nice 10)")
    max_redos: Annotated[int, Field(ge=0)] = Field(
        default=3, description="launches run again, per run, because the host was busy during them "
                               "(thresholds.host_*); one more contaminated launch ends the run as 'host busy'")
    variance_from: str | None = Field(default=None, description="the run id of an A/A calibration (specwatch "
                                      "calibrate), or a file it was exported to (*.json, relative to the "
                                      "experiment file), whose launch variance this run uses, and no other; "
                                      "refused when it was measured on another platform, hardware, image or model")

    @model_validator(mode="after")
    def _coherent(self) -> DesignSpec:
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha={self.alpha!r}: must lie in (0, 0.5); fix: use e.g. 0.05")
        if self.max_rounds is not None and self.max_rounds < self.rounds:
            raise ValueError(f"max_rounds {self.max_rounds} < rounds {self.rounds}; set max_rounds >= rounds")
        if self.adaptive and self.max_rounds is None:
            raise ValueError("adaptive: true needs max_rounds (the most launches per arm)")
        for v in self.varies or []:
            if v not in VARIABLES and not v.startswith("env:"):
                raise ValueError(f"varies: {v!r} is not one of {', '.join(VARIABLES)} or env:NAME")
        return self

