"""What an A/B decided, per candidate arm, as plain data: the input of alert opening and the rows of the
`decisions` and `decision_cells` tables. Built from the run's Assessment (the one verdict the report and
the checks share), so an alert says what the report says."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from statistics import median
from typing import Literal

from specwatch.analysis.metrics import METRICS
from specwatch.analysis.verdict import Assessment, control_arms, ok_rounds, own_direction
from specwatch.records import RunResult
from specwatch.spec import ExperimentSpec

Outcome = Literal["PROMOTE", "REVERT", "NO CHANGE", "INCONCLUSIVE"]
Direction = Literal["regression", "improvement"]
# the per-cell outcome that belongs to each direction's change
CELL_OUTCOME: dict[Direction, str] = {"regression": "regression", "improvement": "gain"}


@dataclass(frozen=True)
class DecidedCell:
    cell: str  # CellKey.id
    label: str  # CellKey.label
    metric: str
    outcome: str  # gain, regression, flat, inconclusive
    before: float | None  # the baseline arm's median over rounds
    after: float | None
    estimate: float | None  # relative change in the metric's own direction
    low: float | None
    high: float | None


@dataclass(frozen=True)
class Decided:
    """One candidate arm against the baseline arm in one run."""

    run_id: str
    series: str  # the comparison: "<experiment>: <candidate> vs <baseline>"
    baseline_arm: str
    candidate_arm: str
    outcome: Outcome
    metric: str  # the lead metric
    estimate: float | None
    low: float | None
    high: float | None
    rounds: int
    reason: str
    started_at: datetime
    cells: tuple[DecidedCell, ...]

    @property
    def direction(self) -> Direction | None:
        return {"REVERT": "regression", "PROMOTE": "improvement"}.get(self.outcome)  # type: ignore[return-value]

    @property
    def changed_cells(self) -> list[DecidedCell]:
        """The cells (and metrics) that moved in the decision's direction: one change, grouped."""
        direction = self.direction
        return [c for c in self.cells if direction and c.outcome == CELL_OUTCOME[direction]]


def series_name(experiment: str, candidate: str, baseline: str) -> str:
    return f"{experiment}: {candidate} vs {baseline}"


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _medians(result: RunResult, arm: str, metric: str) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for launch in ok_rounds(result, arm):
        for cell in launch.cells:
            v = None if cell.rejected else METRICS[metric].value(cell)
            if v is not None:
                values.setdefault(cell.key.id, []).append(v)
    return {cell: median(vs) for cell, vs in values.items()}


def from_assessment(result: RunResult, spec: ExperimentSpec, assessment: Assessment) -> list[Decided]:
    """One Decided per judged candidate arm (no-spec controls are reported, never judged). An arm whose
    acceptance tail collapsed or whose greedy output changed is REVERT, as the run's verdict says."""
    controls = control_arms(spec)
    broken = {c.arm: "acceptance tail collapsed" for c in assessment.curves if c.tail_collapsed}
    broken.update({d.arm: f"greedy output differs from {d.reference}" for d in assessment.divergences})
    out = []
    medians: dict[tuple[str, str], dict[str, float]] = {}
    for ad in assessment.arms:
        if ad.arm in controls:
            continue
        d = ad.decision
        outcome: Outcome = "INCONCLUSIVE" if d.outcome == "CONTINUE" else d.outcome
        reason = d.reason
        if ad.arm in broken:
            outcome, reason = "REVERT", f"{broken[ad.arm]}; {d.reason}"
        lead = d.composite.metric
        est = low = high = None
        if d.composite.interval is not None:
            est, low, high = (_finite(x) for x in own_direction(d.composite.interval, METRICS[lead].higher_is_better))
        cells = []
        for cv in assessment.cells:
            if cv.arm != ad.arm:
                continue
            for arm in (spec.baseline, ad.arm):
                if (arm, cv.metric) not in medians:
                    medians[arm, cv.metric] = _medians(result, arm, cv.metric)
            before = medians[spec.baseline, cv.metric].get(cv.key.id)
            after = medians[ad.arm, cv.metric].get(cv.key.id)
            ci = cv.ci
            cells.append(DecidedCell(cv.key.id, cv.key.label, cv.metric, cv.outcome, before, after,
                                     _finite(ci.estimate) if ci else None, _finite(ci.low) if ci else None,
                                     _finite(ci.high) if ci else None))
        out.append(Decided(result.run_id, series_name(result.experiment_name, ad.arm, spec.baseline), spec.baseline,
                           ad.arm, outcome, lead, est, low, high, d.rounds, reason, result.started_at, tuple(cells)))
    return out
