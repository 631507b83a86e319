"""Per-cell outcomes (gain, regression, flat, inconclusive) for the per-cell table, and the experiment's
PROMOTE / REVERT / NO CHANGE / INCONCLUSIVE from the arms' sequential decisions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from specwatch.analysis.acceptance import tail_collapsed
from specwatch.analysis.intervals import DiffCI
from specwatch.analysis.sequential import SequentialDecision
from specwatch.records import CellKey

Outcome = Literal["gain", "regression", "flat", "inconclusive"]
Decision = Literal["PROMOTE", "REVERT", "NO CHANGE", "INCONCLUSIVE"]


def classify(ci: DiffCI | None, band: float, higher_is_better: bool = True) -> Outcome:
    """gain: CI above +band; regression: CI below -band; flat: CI inside [-band, +band];
    inconclusive: the CI straddles a band edge (or there is no CI). band is relative (0.05 = 5 %).
    For a lower-is-better metric (TTFT) gain and regression swap sides."""
    if band < 0:
        raise ValueError("band must be >= 0")
    if ci is None:
        return "inconclusive"
    if ci.low > band:
        return "gain" if higher_is_better else "regression"
    if ci.high < -band:
        return "regression" if higher_is_better else "gain"
    if -band <= ci.low and ci.high <= band:
        return "flat"
    return "inconclusive"


@dataclass(frozen=True)
class CellVerdict:
    """One compared cell: candidate `arm` vs the baseline at `key`, on one metric."""

    arm: str
    key: CellKey
    metric: str
    ci: DiffCI | None
    outcome: Outcome
    higher_is_better: bool = True

    @classmethod
    def from_ci(cls, arm: str, key: CellKey, metric: str, ci: DiffCI | None, band: float,
                higher_is_better: bool = True) -> CellVerdict:
        return cls(arm, key, metric, ci, classify(ci, band, higher_is_better), higher_is_better)

    @property
    def concurrency(self) -> int | None:
        return self.key.concurrency

    @property
    def label(self) -> str:
        return f"{self.arm} {self.key.label} {self.metric}"


@dataclass(frozen=True)
class VerdictRule:
    """The experiment rule beside the sequential decision (analysis/sequential.py): the acceptance tail
    a speculative arm must keep, and whether PROMOTE needs a gain (False: an arm shown equivalent,
    NO CHANGE, is promoted too)."""

    tail_floor: float = 0.2
    require_gain: bool = True

    def tail_collapsed(self, per_position: Sequence[float]) -> bool:
        return tail_collapsed(per_position, self.tail_floor)


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    reasons: list[str]  # the run's own (correctness, tail collapse, missing levels)
    arm_reasons: list[str] = field(default_factory=list)  # per candidate arm, what its decision says

    @property
    def all_reasons(self) -> list[str]:
        return self.reasons + self.arm_reasons


def experiment_verdict(
    arms: Sequence[tuple[str, SequentialDecision]],
    tail_collapsed_arms: Sequence[str],
    correctness_failures: Sequence[str],
    missing_levels: Sequence[str],
    rule: VerdictRule = VerdictRule(),
) -> Verdict:
    """PROMOTE / REVERT / NO CHANGE / INCONCLUSIVE from each candidate arm's sequential decision.

    REVERT: any correctness failure (greedy output changed: a faster build that changes outputs is a
    bug, not a win), any tail collapse, any arm whose decision is REVERT. INCONCLUSIVE: a declared load
    level without a result, or an arm not decided (INCONCLUSIVE at its maximum, or CONTINUE: the run
    stopped before its looks ended). NO CHANGE: every arm shown equivalent within the band (PROMOTE
    when rule.require_gain is off). PROMOTE: every arm PROMOTE or NO CHANGE, at least one PROMOTE.
    """
    reasons = [f"correctness: greedy output changed: {failure}" for failure in correctness_failures]
    reasons += [f"tail collapse: {arm} last-position acceptance below {rule.tail_floor:g}"
                for arm in tail_collapsed_arms]
    reverted = [f"{arm}: {d.reason}" for arm, d in arms if d.outcome == "REVERT"]
    if reasons or reverted:
        return Verdict("REVERT", reasons, reverted)
    if not arms:
        return Verdict("INCONCLUSIVE", ["no candidate cells at the declared load levels"])
    missing = [f"missing: no result at {level} (rejected or not run)" for level in missing_levels]
    undecided = [f"{arm}: {_undecided(d)}" for arm, d in arms if d.outcome in ("INCONCLUSIVE", "CONTINUE")]
    if missing or undecided:
        return Verdict("INCONCLUSIVE", missing, undecided)
    decided = [f"{arm}: {d.outcome} after {d.rounds} round(s): {d.reason}" for arm, d in arms]
    if all(d.outcome == "NO CHANGE" for _, d in arms):
        if rule.require_gain:
            return Verdict("NO CHANGE", [], decided)
        return Verdict("PROMOTE", ["equivalent within the band; the rule does not require a gain"], decided)
    return Verdict("PROMOTE", [], decided)


def _undecided(d: SequentialDecision) -> str:
    if d.outcome == "CONTINUE":
        return f"the run stopped after {d.rounds} round(s), before the looks decided: {d.reason}"
    more = f"; about {d.more_rounds} more round(s) would likely decide" if d.more_rounds else \
        "; more rounds are unlikely to decide at this estimate (it sits on the band's edge)"
    return d.reason + more
