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
    """The experiment rule. Defaults follow the seed proposal: promote only on a real gain with a
    healthy acceptance tail. `band` is the noise band cells are classified with (DOMAIN: +-5 % is
    flat in practice; a team that keeps changes only at >= +8 % sets band=0.08)."""

    band: float = 0.05
    tail_floor: float = 0.2
    require_gain: bool = True
    metrics: tuple[str, ...] = ("decode_tok_s",)  # each judged on its own; the first is the one that must gain

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
    declared_levels: Sequence[str],
    rule: VerdictRule = VerdictRule(),
) -> Verdict:
    """PROMOTE / REVERT / INCONCLUSIVE from classified cells.

    Only cells of rule.metrics at the declared load levels (CellKey.level: `c=4`, `r=2.5/s`; all
    levels present if none are declared) count; each metric is judged on its own, with its
    direction. REVERT: any correctness failure (greedy output changed: a faster build that changes
    outputs is a bug, not a win), any tail collapse, any regressing cell of any declared metric.
    PROMOTE: every counted cell gain or flat, at least one gain of the first declared metric (if
    rule.require_gain), every declared level measured. Otherwise INCONCLUSIVE, with the straddling
    cells listed.
    """
    lead = rule.metrics[0]
    declared = set(declared_levels) or {c.key.level for c in cells if c.metric in rule.metrics}
    counted = [c for c in cells if c.metric in rule.metrics and c.key.level in declared]
    gains = [c for c in counted if c.outcome == "gain" and c.metric == lead]
    regressions = [c for c in counted if c.outcome == "regression"]
    unsure = [c for c in counted if c.outcome == "inconclusive"]
    missing = sorted(declared - {c.key.level for c in counted if c.metric == lead})

    reasons: list[str] = []
    for failure in correctness_failures:
        speed = f" (despite {len(gains)} faster cell(s))" if gains else ""
        reasons.append(f"correctness: greedy output changed: {failure}{speed}")
    for arm in tail_collapsed_arms:
        reasons.append(f"tail collapse: {arm} last-position acceptance below {rule.tail_floor:g}")
    cell_reasons = [f"regression: {c.label} {_fmt_ci(c.ci)} {_worse_side(c, rule.band)}" for c in regressions]
    if reasons or cell_reasons:
        return Verdict("REVERT", reasons + cell_reasons, cell_reasons=len(cell_reasons))

    if not counted:
        return Verdict("INCONCLUSIVE", [f"no {lead} cells at the declared load levels"])
    reasons = [f"missing: no {lead} result at {level} (rejected or not run)" for level in missing]
    cell_reasons = [f"inconclusive: {c.label} {_fmt_ci(c.ci)} straddles +-{rule.band:.0%}" for c in unsure]
    if reasons or cell_reasons:
        return Verdict("INCONCLUSIVE", reasons + cell_reasons, unsure, len(cell_reasons))
    if rule.require_gain and not gains:
        return Verdict("INCONCLUSIVE", [f"no {lead} cell gained beyond +-{rule.band:.0%} (the others flat or "
                                        "better); the rule requires a gain"])
    cell_reasons = [f"gain: {c.label} {_fmt_ci(c.ci)}" for c in counted if c.outcome == "gain"]
    cell_reasons += [f"flat: {c.label} {_fmt_ci(c.ci)}" for c in counted if c.outcome == "flat"]
    return Verdict("PROMOTE", cell_reasons, cell_reasons=len(cell_reasons))


def _worse_side(c: CellVerdict, band: float) -> str:
    return f"below -{band:.0%}" if c.higher_is_better else f"above +{band:.0%} (lower is better)"


def _fmt_ci(ci: DiffCI | None) -> str:
    if ci is None:
        return "(no pairs)"
    if ci.n_pairs < 2:
        return f"{ci.estimate:+.1%} (n=1: no interval)"
    return f"{ci.estimate:+.1%} [{ci.low:+.1%}, {ci.high:+.1%}] n={ci.n_pairs}"