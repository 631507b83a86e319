"""`design:`: restart blocks, the variable under test, the correctness probes."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, PositiveInt, model_validator

from specwatch.design import VARIABLES
from specwatch.spec.base import Requests, Strict, Tokens, cap

# each block is a server launch per arm, minutes each
_BLOCKS = cap(1000, "a block is a server launch per arm")


class DesignSpec(Strict):
    """How the arms are run: restart blocks, the variable under test, the correctness probes."""

    blocks: Annotated[PositiveInt, _BLOCKS] = Field(default=3, description="launches per arm (restart blocks); "
                                                    ">= 3 for a verdict")
    max_blocks: Annotated[PositiveInt, _BLOCKS] | None = Field(default=None, description="adaptive stopping ceiling")
    adaptive: bool = False
    varies: list[str] | None = Field(default=None, description="k, image, method, args, launcher, env or env:NAME")
    allow_confounded: bool = False
    probes: Annotated[Requests, Field(ge=0)] = Field(default=4, description="greedy probe prompts per arm; 0 = off")
    probe_tokens: Annotated[Tokens, Field(ge=2)] = 32
    variance_from: str | None = Field(default=None, description="the run id of an A/A calibration (specwatch "
                                      "calibrate) whose launch variance this run uses, and no other; refused when "
                                      "it was measured on another platform, hardware, image or model")

    @model_validator(mode="after")
    def _coherent(self) -> DesignSpec:
        if self.max_blocks is not None and self.max_blocks < self.blocks:
            raise ValueError(f"max_blocks {self.max_blocks} < blocks {self.blocks}; set max_blocks >= blocks")
        if self.adaptive and self.max_blocks is None:
            raise ValueError("adaptive: true needs max_blocks (the most launches per arm)")
        for v in self.varies or []:
            if v not in VARIABLES and not v.startswith("env:"):
                raise ValueError(f"varies: {v!r} is not one of {', '.join(VARIABLES)} or env:NAME")
        return self

