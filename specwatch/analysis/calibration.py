"""The between-launch variance an A/A calibration measures (issue 22, deliverable 4).

An A/A runs one arm in both slots of every round. Per cell and judged metric, the per-round value is
log(slot B / slot A) of the cell's catalogue figure, as the sequential decision forms it for an A/B
(specwatch/analysis/sequential.py); its sd over rounds, with rounds - 1 degrees of freedom, is the prior
`sequential.PriorVariance` takes. The sign and the metric's direction do not change an sd.

The composite (the per-round mean over cells of one metric) gets its own sd: its variance includes the
cells' covariance (one slow launch slows every cell of its round), which the cells' sds do not give. As
in `sequential`, a round counts towards it only when every cell has a value.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection
from dataclasses import dataclass

from specwatch.analysis.metrics import METRICS
from specwatch.analysis.sequential import COMPOSITE
from specwatch.records import ArmResult, RunResult


@dataclass(frozen=True)
class MeasuredVariance:
    """One cell's (or a metric's composite's) between-launch sd of the per-round log-ratio."""

    cell: str  # a cell id (CellKey.id), or sequential.COMPOSITE
    metric: str  # a judged metric's name (verdict.metrics)
    sd: float
    df: int  # rounds with a value - 1
    composite_of: tuple[str, ...] = ()  # the composite: the cells it averages, sorted


def round_log_ratios(result: RunResult, slot_a: str, slot_b: str) -> dict[tuple[str, str], dict[int, float]]:
    """(cell id, metric) -> {round: log(B / A)}, over the rounds where both launches measured the cell
    (launch ok, cell not rejected, both values positive)."""
    def cells_of(arm: str) -> dict[int, dict[str, dict[str, float]]]:
        launches: list[ArmResult] = [a for a in result.arms if a.name == arm and a.status == "ok"]
        return {a.round: {c.cell: {name: v for name, m in METRICS.items() if (v := m.value(c)) is not None}
                          for c in a.cells if not c.rejected} for a in launches}

    a_rounds, b_rounds = cells_of(slot_a), cells_of(slot_b)
    out: dict[tuple[str, str], dict[int, float]] = {}
    for round_no in sorted(a_rounds.keys() & b_rounds.keys()):
        a_cells, b_cells = a_rounds[round_no], b_rounds[round_no]
        for cell in a_cells.keys() & b_cells.keys():
            for metric, a in a_cells[cell].items():
                b = b_cells[cell].get(metric)
                if b is not None and a > 0 and b > 0:
                    out.setdefault((cell, metric), {})[round_no] = math.log(b / a)
    return out


def launch_variances(result: RunResult, slot_a: str, slot_b: str,
                     composite_cells: Collection[str]) -> list[MeasuredVariance]:
    """Every cell's sd, then each metric's composite over those of `composite_cells` (the judged cells) that
    have the metric; only those with at least one degree of freedom."""
    ratios = round_log_ratios(result, slot_a, slot_b)
    found = [_measured(cell, metric, list(by_round.values())) for (cell, metric), by_round in sorted(ratios.items())]
    for metric in sorted({m for _, m in ratios}):
        cells = sorted(c for c, m in ratios if m == metric and c in composite_cells)
        if not cells:
            continue
        rounds = set.intersection(*(set(ratios[(c, metric)]) for c in cells))
        means = [statistics.fmean(ratios[(c, metric)][r] for c in cells) for r in sorted(rounds)]
        found.append(_measured(COMPOSITE, metric, means, tuple(cells)))
    return [v for v in found if v.df >= 1]


def _measured(cell: str, metric: str, values: list[float], composite_of: tuple[str, ...] = ()) -> MeasuredVariance:
    sd = statistics.stdev(values) if len(values) > 1 else math.nan
    return MeasuredVariance(cell, metric, sd, len(values) - 1, composite_of)
