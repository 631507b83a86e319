"""What every part of the experiment file shares: strict models, caps with their reasons, seeds."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, PositiveInt, ValidationInfo


def expand(path: Path) -> Path:
    """`~` and `~user` expanded; ValueError (a validation problem) when the user does not exist."""
    try:
        return path.expanduser()
    except RuntimeError:
        raise ValueError(f"{str(path)!r}: {str(path).split('/')[0]} is not a user here; fix: write the full path") \
            from None


class Strict(BaseModel):
    # inf and nan are never a setting: `.inf` as a duration or timeout would wait forever
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def cap(limit: int, why: str) -> AfterValidator:
    """At most `limit`: a value past it would exhaust any machine; the error names the cap and why it is there."""

    def check(value: int) -> int:
        if value > limit:
            raise ValueError(f"{value} is over specwatch's cap of {limit:,} ({why}); fix: use at most {limit:,}")
        return value

    return AfterValidator(check)


def _fits_int64(value: int) -> int:
    # seeds reach torch.manual_seed and vLLM's sampling params, which take 64-bit integers
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{value} does not fit a 64-bit seed; fix: use a whole number between 0 and 2**63 - 1")
    return value


Seed = Annotated[int, AfterValidator(_fits_int64)]
# The caps sit far above real GPU work (the largest published models: ~130 layers, hidden 16384, 128 heads,
# ~256k vocab, 10M positions) and far below what would exhaust a machine before vLLM could refuse it.
Tokens = Annotated[int, cap(1 << 24, "16M tokens: past the longest context window served")]
Concurrency = Annotated[PositiveInt, cap(65_536, "one TCP connection per request in flight; a client host has "
                                                   "~64k ports per server address")]
MAX_REQUESTS = 1_000_000  # per cell: each request's sample is kept in memory, results.json and DuckDB
Requests = Annotated[int, cap(MAX_REQUESTS, "each request's sample is kept in memory, results.json and DuckDB")]


def is_stored(info: ValidationInfo) -> bool:
    """A past run's spec (validation context `stored`): what it names on disk may be gone since, and it was
    checked on the machine it ran on."""
    return bool(info.context and info.context.get("stored"))
