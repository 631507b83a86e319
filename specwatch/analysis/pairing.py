"""A run's rounds as the sequential decision's input: per candidate arm, cell and judged metric, one
paired log-ratio against the baseline per round (analysis/sequential.py `CellSeries`).

The unit of replication stays the round (measurement rule 7): requests are paired only to make the
round's one value less noisy, never counted as replicates. Within a round every arm's launch sends the
same prompt at each request index (common random numbers), so request i of the candidate and request
i of the baseline did the same work; their log-ratio has the prompt's own difficulty taken out.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from statistics import median

from specwatch.analysis.metrics import BATCHED_CONCURRENCY, METRICS, Metric, judged_at
from specwatch.analysis.sequential import COMPOSITE, CellSeries, PriorVariance
from specwatch.records import ArmResult, CellKey, CellResult, RunResult

Priors = Mapping[tuple[str, str], PriorVariance]  # (cell id or sequential.COMPOSITE, metric)


@dataclass(frozen=True)
class Comparison:
    """One candidate arm against the baseline, round by round."""

    arm: str
    series: tuple[CellSeries, ...]
    keys: Mapping[str, CellKey]  # a series' cell name -> its key
    paired: int  # cell-rounds summarised from paired requests
    valued: int  # cell-rounds with a value

    @property
    def pairing(self) -> str:
        return (f"{self.paired} of {self.valued} cell-round(s) from requests paired by index (median paired "
                "log-ratio), the rest from the cell figures")


def _batched(key: CellKey) -> bool:
    """A batched closed-loop cell's requests are not paired (metrics.BATCHED_CONCURRENCY says why)."""
    return key.concurrency is not None and key.concurrency >= BATCHED_CONCURRENCY


def round_value(base: CellResult | None, cand: CellResult | None, metric: Metric) -> tuple[float, bool]:
    """(log(candidate / baseline), direction-normalised so + is better; NaN: no value) and whether it
    came from paired requests. A rejected or missing cell gives NaN, as does a zero figure."""
    if base is None or cand is None or base.rejected or cand.rejected:
        return math.nan, False
    sign = 1.0 if metric.higher_is_better else -1.0
    paired = None if _batched(base.key) else _paired_requests(base, cand, metric)
    if paired:
        return sign * median(paired), True
    b, c = metric.value(base), metric.value(cand)
    if not b or not c or b <= 0 or c <= 0:
        return math.nan, False
    return sign * math.log(c / b), False


def _paired_requests(base: CellResult, cand: CellResult, metric: Metric) -> list[float] | None:
    """Per request index, log(candidate / baseline), when both arms have the figure for exactly the same
    requests; otherwise None (the cell figure is used). A request only one arm completed would make the
    two sets differ in the work they did: keeping only the shared ones would favour the arm that dropped
    its slow requests."""
    if metric.request is None:
        return None
    get = metric.request
    b = {r.index: v for r in base.requests if r.status == "ok" and (v := get(r)) is not None and v > 0}
    c = {r.index: v for r in cand.requests if r.status == "ok" and (v := get(r)) is not None and v > 0}
    if not b or b.keys() != c.keys() or len(b) != len(base.requests) or len(c) != len(cand.requests):
        return None
    return [math.log(c[i] / b[i]) for i in sorted(b)]


def rounds_of(result: RunResult) -> int:
    """Rounds the run reached (a round is one launch of each arm: the n-th launch of every arm)."""
    return max((a.round for a in result.arms if not a.in_progress), default=0)


def _cells(launches: list[ArmResult], round_no: int) -> dict[CellKey, CellResult]:
    return {c.key: c for a in launches if a.round == round_no and a.status == "ok" for c in a.cells}


def compare(result: RunResult, baseline: str, arm: str, metrics: list[str], levels: Collection[str],
            priors: Priors | None = None) -> Comparison:
    """`arm` against `baseline` over the run's rounds: one series per cell measured at `levels` (every
    level when empty) and per judged metric, with the stored prior variance of each where one is given."""
    priors = priors or {}
    rounds = rounds_of(result)
    base = [a for a in result.arms if a.name == baseline]
    cand = [a for a in result.arms if a.name == arm]
    per_round = [(_cells(base, n), _cells(cand, n)) for n in range(1, rounds + 1)]
    keys = sorted({k for b, c in per_round for k in (*b, *c) if not levels or k.level in levels},
                  key=CellKey.sort_key)
    # series are named by label (`c=4 code`: what the decision's reasons print), by id if labels collide
    name_of = {k: k.label for k in keys} if len({k.label for k in keys}) == len(keys) else {k: k.id for k in keys}
    series, paired, valued = [], 0, 0
    for name in metrics:
        for key in keys:
            metric = judged_at(METRICS[name], key.concurrency)
            values = [round_value(b.get(key), c.get(key), metric) for b, c in per_round]
            paired += sum(p for _, p in values)
            valued += sum(math.isfinite(v) for v, _ in values)
            series.append(CellSeries(name_of[key], name, tuple(v for v, _ in values), priors.get((key.id, name))))
    return Comparison(arm, tuple(series), {name_of[k]: k for k in keys}, paired, valued)


def composite_priors(priors: Priors | None, metrics: list[str]) -> dict[str, PriorVariance]:
    """Per metric, the stored variance of its composite (keyed (sequential.COMPOSITE, metric))."""
    return {m: p for m in metrics if (p := (priors or {}).get((COMPOSITE, m))) is not None}
