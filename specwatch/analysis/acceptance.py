"""Summaries of a per-position acceptance curve."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from specwatch.records import SpecWindow


def decay(per_position: Sequence[float]) -> float | None:
    """Last-position acceptance over first-position acceptance (1.0 = no decay)."""
    if len(per_position) == 0 or per_position[0] <= 0:
        return None
    return float(per_position[-1]) / float(per_position[0])


def tail_collapsed(per_position: Sequence[float], floor: float = 0.2) -> bool:
    """True when the deepest position is accepted less often than `floor`: that slot costs
    verify compute and graph memory but rarely yields a token."""
    return len(per_position) > 0 and float(per_position[-1]) < floor


def pooled_positions(windows: Iterable[SpecWindow]) -> list[float]:
    """Acceptance per position pooled over counter windows: sum accepted / sum drafts, each position over
    the windows that drafted that deep (a k-ladder's shallower launches say nothing of deeper positions)."""
    drafts: list[float] = []
    accepted: list[float] = []
    for w in windows:
        if not w.num_drafts or not w.accepted_per_position:
            continue
        for pos, value in enumerate(w.accepted_per_position):
            if pos == len(accepted):
                drafts.append(0.0)
                accepted.append(0.0)
            drafts[pos] += w.num_drafts
            accepted[pos] += value
    return [a / d for a, d in zip(accepted, drafts, strict=True)]
