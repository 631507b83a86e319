"""Optional adaptive stopping: whether to launch another block per arm."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from specwatch.analysis.decision import classify
from specwatch.analysis.intervals import DiffCI


@dataclass(frozen=True)
class StopDecision:
    add_block: bool
    reason: str
    pending: list[Hashable]  # cells whose CI still straddles a band edge


def adaptive_decision(
    cis: Mapping[Any, DiffCI | None],
    band: float,
    blocks_done: int,
    min_blocks: int = 3,
    max_blocks: int = 10,
) -> StopDecision:
    """Whether to launch another block per arm.

    Below min_blocks: always (>= 3 blocks per arm is the floor, measurement rule 7). Then stop as soon
    as every compared cell is classified (gain, regression or flat) or max_blocks is reached.
    Stopping on a clear result is a repeated look at the data: with 95 % CIs at every look the
    wrong-call rate grows several-fold over a fixed design (benchmarks/adaptive_stopping.py
    measures it). To keep the fixed design's error rate, compute the CIs fed to this function at
    a higher per-look confidence (the benchmark calibrates it, e.g. 99 % for looks 3..10).
    """
    if not 1 <= min_blocks <= max_blocks:
        raise ValueError("need 1 <= min_blocks <= max_blocks")
    pending = [key for key, ci in cis.items() if classify(ci, band) == "inconclusive"]
    if blocks_done >= max_blocks:
        why = f"maximum of {max_blocks} blocks reached"
        return StopDecision(False, why + (f"; {len(pending)} cell(s) still inconclusive" if pending else ""), pending)
    if blocks_done < min_blocks:
        return StopDecision(True, f"{blocks_done} of the minimum {min_blocks} blocks done", pending)
    if not pending:
        return StopDecision(False, f"every cell cleared the +-{band:.0%} band after {blocks_done} blocks", pending)
    return StopDecision(True, f"{len(pending)} cell(s) straddle the +-{band:.0%} band", pending)
