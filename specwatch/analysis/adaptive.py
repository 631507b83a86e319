"""Optional adaptive stopping: whether to launch another round per arm."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from specwatch.analysis.decision import classify
from specwatch.analysis.intervals import DiffCI


@dataclass(frozen=True)
class StopDecision:
    add_round: bool
    reason: str
    pending: list[Hashable]  # cells whose CI still straddles a band edge


def adaptive_decision(
    cis: Mapping[Any, DiffCI | None],
    band: float,
    rounds_done: int,
    min_rounds: int = 3,
    max_rounds: int = 10,
) -> StopDecision:
    """Whether to launch another round per arm.

    Below min_rounds: always (>= 3 rounds per arm is the floor, measurement rule 7). Then stop as soon
    as every compared cell is classified (gain, regression or flat) or max_rounds is reached.
    Stopping on a clear result is a repeated look at the data: with 95 % CIs at every look the
    wrong-call rate grows several-fold over a fixed design (benchmarks/adaptive_stopping.py
    measures it). To keep the fixed design's error rate, compute the CIs fed to this function at
    a higher per-look confidence (the benchmark calibrates it, e.g. 99 % for looks 3..10).
    """
    if not 1 <= min_rounds <= max_rounds:
        raise ValueError("need 1 <= min_rounds <= max_rounds")
    pending = [key for key, ci in cis.items() if classify(ci, band) == "inconclusive"]
    if rounds_done >= max_rounds:
        why = f"maximum of {max_rounds} rounds reached"
        return StopDecision(False, why + (f"; {len(pending)} cell(s) still inconclusive" if pending else ""), pending)
    if rounds_done < min_rounds:
        return StopDecision(True, f"{rounds_done} of the minimum {min_rounds} rounds done", pending)
    if not pending:
        return StopDecision(False, f"every cell cleared the +-{band:.0%} band after {rounds_done} rounds", pending)
    return StopDecision(True, f"{len(pending)} cell(s) straddle the +-{band:.0%} band", pending)
