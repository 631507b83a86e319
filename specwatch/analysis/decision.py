"""Per-cell outcomes (gain, regression, flat, inconclusive) and the PROMOTE / REVERT /
INCONCLUSIVE rule of an experiment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from specwatch.analysis.acceptance import tail_collapsed
from specwatch.analysis.intervals import DiffCI
from specwatch.records import CellKey

Outcome = Literal["gain", "regression", "flat", "inconclusive"]
Decision = Literal["PROMOTE", "REVERT", "INCONCLUSIVE"]
OUTCOMES: tuple[Outcome, ...] = ("gain", "regression", "flat", "inconclusive")


def classify(ci: DiffCI | None, band: float) -> Outcome:
    """gain: CI above +band; regression: CI below -band; flat: CI inside [-band, +band];
    inconclusive: the CI straddles a band edge (or there is no CI). band is relative (0.05 = 5 %)."""
    if band < 0:
        raise ValueError("band must be >= 0")
    if ci is None:
        return "inconclusive"
    if ci.low > band:
        return "gain"
    if ci.high < -band:
        return "regression"
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

    @classmethod
    def from_ci(cls, arm: str, key: CellKey, metric: str, ci: DiffCI | None, band: float) -> CellVerdict:
        return cls(arm, key, metric, ci, classify(ci, band))

    @property
    def concurrency(self) -> int | None:
        return self.key.concurrency

    @property
    def label(self) -> str:
        return f"{self.arm} {self.key.label} {self.metric}"


@dataclass(frozen=True)
class VerdictRule:
    """The experiment rule. Defaults follow the seed proposal: promote only on a real gain with a
    healthy acceptance tail. `band` is the noise band cells are classified with (DOMAIN: +-5 % is
    flat in practice; a team that keeps changes only at >= +8 % sets band=0.08)."""

    band: float = 0.05
    tail_floor: float = 0.2
    require_gain: bool = True
    metric: str = "decode_tok_s"

    def tail_collapsed(self, per_position: Sequence[float]) -> bool:
        return tail_collapsed(per_position, self.tail_floor)


@dataclass
class Verdict:
    decision: Decision
    reasons: list[str]  # the run's reasons first, then one per deciding cell
    needs_more_blocks: list[CellVerdict] = field(default_factory=list)
    cell_reasons: int = 0  # how many of `reasons` (at the end) are about single cells

    @property
    def run_reasons(self) -> list[str]:
        """What a per-cell verdict table does not already show."""
        return self.reasons[: len(self.reasons) - self.cell_reasons]


def experiment_verdict(
    cells: Sequence[CellVerdict],
    tail_collapsed_arms: Sequence[str],
    correctness_failures: Sequence[str],
    declared_concurrency: Sequence[int],
    rule: VerdictRule = VerdictRule(),
) -> Verdict:
    """PROMOTE / REVERT / INCONCLUSIVE from classified cells.

    Only cells of rule.metric at the declared concurrencies count (all concurrencies present if
    none are declared). REVERT: any correctness failure (greedy output changed: a faster build
    that changes outputs is a bug, not a win), any tail collapse, any regressing cell.
    PROMOTE: every counted cell gain or flat, at least one gain (if rule.require_gain), every
    declared concurrency measured. Otherwise INCONCLUSIVE, with the straddling cells listed.
    """
    declared = set(declared_concurrency) or {
        c.concurrency for c in cells if c.metric == rule.metric and c.concurrency is not None}
    counted = [c for c in cells if c.metric == rule.metric and c.concurrency in declared]
    gains = [c for c in counted if c.outcome == "gain"]
    regressions = [c for c in counted if c.outcome == "regression"]
    unsure = [c for c in counted if c.outcome == "inconclusive"]
    missing = sorted(declared - {c.concurrency for c in counted})

    reasons: list[str] = []
    for failure in correctness_failures:
        speed = f" (despite {len(gains)} faster cell(s))" if gains else ""
        reasons.append(f"correctness: greedy output changed: {failure}{speed}")
    for arm in tail_collapsed_arms:
        reasons.append(f"tail collapse: {arm} last-position acceptance below {rule.tail_floor:g}")
    cell_reasons = [f"regression: {c.label} {_fmt_ci(c.ci)} below -{rule.band:.0%}" for c in regressions]
    if reasons or cell_reasons:
        return Verdict("REVERT", reasons + cell_reasons, cell_reasons=len(cell_reasons))

    if not counted:
        return Verdict("INCONCLUSIVE", [f"no {rule.metric} cells at the declared concurrencies"])
    reasons = [f"missing: no {rule.metric} result at c={conc} (rejected or not run)" for conc in missing]
    cell_reasons = [f"inconclusive: {c.label} {_fmt_ci(c.ci)} straddles +-{rule.band:.0%}" for c in unsure]
    if reasons or cell_reasons:
        return Verdict("INCONCLUSIVE", reasons + cell_reasons, unsure, len(cell_reasons))
    if rule.require_gain and not gains:
        return Verdict("INCONCLUSIVE", [f"every cell is flat within +-{rule.band:.0%}; the rule requires a gain"])
    cell_reasons = [f"gain: {c.label} {_fmt_ci(c.ci)}" for c in gains]
    cell_reasons += [f"flat: {c.label} {_fmt_ci(c.ci)}" for c in counted if c.outcome == "flat"]
    return Verdict("PROMOTE", cell_reasons, cell_reasons=len(cell_reasons))


def _fmt_ci(ci: DiffCI | None) -> str:
    if ci is None:
        return "(no pairs)"
    if ci.n_pairs < 2:
        return f"{ci.estimate:+.1%} (n=1: no interval)"
    return f"{ci.estimate:+.1%} [{ci.low:+.1%}, {ci.high:+.1%}] n={ci.n_pairs}"