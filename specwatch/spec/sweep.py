"""`sweep:`: a context-length sweep's depths, runs and what counts as a loop or a cliff."""

from __future__ import annotations

from pydantic import Field, PositiveInt, field_validator

from specwatch.spec.base import Strict


class SweepSpec(Strict):
    """A context-length sweep (`specwatch sweep FILE`): per arm and depth, one warm-up and `runs` timed
    single-stream requests with a prompt calibrated to exactly that depth."""

    depths: list[PositiveInt] | None = Field(
        default=None, description="context depths in tokens, increasing; default: powers of two from min_depth "
                                  "up to the server's max_model_len (depth + workload.max_tokens must fit)")
    min_depth: PositiveInt = Field(default=1024, description="the first default depth")
    runs: PositiveInt = Field(default=3, description="timed single-stream runs per depth, after one warm-up")
    prompt_class: str = Field(default="generated", description="where prompts come from; the default is a "
                              "seeded generator that never repeats itself (class texts wrap around)")
    loop_threshold: float = Field(default=0.5, description="a run loops when its repetition ratio is above this "
                                  "(or a phrase of 4+ words repeats 3+ times)")
    cliff_drop: float = Field(default=0.3, description="a decode drop between neighbouring depths larger than "
                              "this share, beyond its interval, is a cliff")

    @field_validator("depths")
    @classmethod
    def _increasing(cls, depths: list[int] | None) -> list[int] | None:
        if depths is not None:
            if not depths:
                raise ValueError("[] holds no depth; fix: list at least one depth, or leave depths out for the "
                                 "default powers of two")
            bad = next((i for i in range(1, len(depths)) if depths[i] <= depths[i - 1]), None)
            if bad is not None:
                raise ValueError(f"{depths} is not increasing ({depths[bad]} after {depths[bad - 1]}); "
                                 "fix: list each depth once, smallest first, e.g. [1024, 2048, 4096]")
        return depths

    @field_validator("loop_threshold")
    @classmethod
    def _ratio(cls, value: float) -> float:
        if not 0 < value <= 1:
            raise ValueError(f"{value!r} is outside (0, 1]; fix: a repetition ratio above 0 "
                             "and at most 1, e.g. 0.5")
        return value

    @field_validator("cliff_drop")
    @classmethod
    def _drop(cls, value: float) -> float:
        if not 0 < value < 1:
            raise ValueError(f"{value!r} is outside (0, 1); fix: a share of decode tok/s, e.g. 0.3")
        return value

    def depths_for(self, max_model_len: int, max_tokens: int) -> list[int]:
        """The depths to run on a server of `max_model_len`: the list given, else powers of two that fit."""
        if self.depths is not None:
            return list(self.depths)
        out, depth = [], self.min_depth
        while depth + max_tokens <= max_model_len:
            out.append(depth)
            depth *= 2
        return out


