"""Summaries of a per-position acceptance curve."""

from __future__ import annotations

from collections.abc import Sequence


def decay(per_position: Sequence[float]) -> float | None:
    """Last-position acceptance over first-position acceptance (1.0 = no decay)."""
    if len(per_position) == 0 or per_position[0] <= 0:
        return None
    return float(per_position[-1]) / float(per_position[0])


def tail_collapsed(per_position: Sequence[float], floor: float = 0.2) -> bool:
    """True when the deepest position is accepted less often than `floor`: that slot costs
    verify compute and graph memory but rarely yields a token."""
    return len(per_position) > 0 and float(per_position[-1]) < floor
