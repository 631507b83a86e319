"""From a run's rounds to a decision a team can act on: the sequential decision per candidate arm
(analysis/sequential.py over analysis/pairing.py), its per-cell intervals, acceptance curves, the
greedy-output correctness gate, the cost model and the PROMOTE/REVERT/NO CHANGE/INCONCLUSIVE rule.

Pure: it reads a RunResult (from results.json or rebuilt from DuckDB) and the spec, so
`specwatch report` recomputes exactly what the flow decided.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from statistics import median

from specwatch.analysis.acceptance import decay, pooled_positions, tail_collapsed
from specwatch.analysis.cost import CostPrediction, fit_step_time, predict_k, prediction_error, step_time_from
from specwatch.analysis.decision import CellVerdict, Verdict, VerdictRule, experiment_verdict
from specwatch.analysis.intervals import DiffCI
from specwatch.analysis.metrics import METRICS
from specwatch.analysis.pairing import Comparison, Priors, compare, composite_priors
from specwatch.analysis.sequential import (
    COMPOSITE,
    Interval,
    SequentialDecision,
    SequentialDesign,
    decide,
    look_alpha,
)
from specwatch.records import ArmResult, CellKey, QualityRecord, RunResult, load_level
from specwatch.spec import ExperimentSpec


def sequential_design(spec: ExperimentSpec) -> SequentialDesign:
    """The spec's looks: from `rounds` rounds to `max_rounds` when adaptive, else exactly `rounds` (one
    look, spending the whole alpha)."""
    d = spec.design
    top = d.max_rounds if d.adaptive and d.max_rounds else d.rounds
    return SequentialDesign(alpha=d.alpha, band=spec.thresholds.noise_band, min_rounds=d.rounds, max_rounds=top)


@dataclass(frozen=True)
class ArmDecision:
    """One non-baseline arm against the baseline: its rounds and what they decided."""

    comparison: Comparison
    decision: SequentialDecision

    @property
    def arm(self) -> str:
        return self.comparison.arm


def decisions(result: RunResult, spec: ExperimentSpec, priors: Priors | None = None) -> list[ArmDecision]:
    """Every non-baseline arm's sequential decision over the rounds run so far (the look the runner
    takes between rounds, and the verdict after the last). An arm without a judged cell has none."""
    design = sequential_design(spec)
    metrics = list(spec.verdict.metrics)
    out = []
    for arm in spec.arms:
        if arm.name == spec.baseline:
            continue
        comp = compare(result, spec.baseline, arm.name, metrics, declared_levels(spec), priors)
        if not comp.series:
            continue
        # a run never has more rounds than its design allows; a stored run whose spec was edited might
        series = [replace(s, values=s.values[:design.max_rounds]) for s in comp.series]
        out.append(ArmDecision(comp, decide(series, design, composite_priors(priors, metrics), metrics[0])))
    return out


@dataclass(frozen=True)
class ArmCurve:
    arm: str
    k: int
    per_position: list[float]  # pooled over every accepted cell and round: sum accepted_i / sum drafts
    decay: float | None
    tail_collapsed: bool


@dataclass(frozen=True)
class Divergence:
    arm: str
    reference: str
    probe: int
    position: int  # first token index where the greedy outputs differ


@dataclass(frozen=True)
class CostRow:
    arm: str
    k: int
    measured_tok_s: float
    predicted_tok_s: float  # from the baseline arm's curve and the fitted step time
    error: float


@dataclass
class Assessment:
    cells: list[CellVerdict]
    verdict: Verdict
    arms: list[ArmDecision]
    design: SequentialDesign
    curves: list[ArmCurve]
    divergences: list[Divergence]
    compared_probes: int
    cost: dict[str, CostPrediction] = field(default_factory=dict)
    cost_rows: list[CostRow] = field(default_factory=list)
    rounds: dict[str, int] = field(default_factory=dict)


def ok_rounds(result: RunResult, arm: str) -> list[ArmResult]:
    return sorted((a for a in result.arms if a.name == arm and a.status == "ok"), key=lambda a: a.round)


def measured_keys(launches: list[ArmResult]) -> list[CellKey]:
    """The cells these launches measured, in report order."""
    return sorted({c.key for b in launches for c in b.cells}, key=CellKey.sort_key)


def cell_verdicts(arms: list[ArmDecision], design: SequentialDesign) -> list[CellVerdict]:
    """The per-cell table's outcomes: each cell's interval at the deciding look (the same intervals the
    decision read), turned back into the metric's own direction and classified against the band."""
    out = []
    for ad in arms:
        d = ad.decision
        confidence = 1 - 2 * look_alpha(design, d.rounds)
        for u in d.cells:
            if u.cell == COMPOSITE:
                continue
            better = METRICS[u.metric].higher_is_better
            ci = None
            if u.interval is not None:
                est, lo, hi = own_direction(u.interval, better)
                ci = DiffCI(est, lo, hi, u.rounds, "sequential", confidence)
            out.append(CellVerdict.from_ci(ad.arm, ad.comparison.keys[u.cell], u.metric, ci, design.band, better))
    return out


def own_direction(i: Interval, higher_is_better: bool) -> tuple[float, float, float]:
    """(estimate, low, high) of a decision's interval (+ is better) as the metric's own relative change:
    a lower-is-better metric's change is the inverse ratio."""
    if higher_is_better:
        return i.estimate, i.low, i.high
    return 1 / (1 + i.estimate) - 1, 1 / (1 + i.high) - 1, math.inf if i.low <= -1 else 1 / (1 + i.low) - 1


def declared_levels(spec: ExperimentSpec) -> list[str]:
    """The load levels the verdict counts (CellKey.level): the declared ones, else every one the workload runs."""
    wl, v = spec.workload, spec.verdict
    levels = [load_level(concurrency=c) for c in v.concurrency or wl.concurrency]
    levels += [load_level(rate=r) for r in (v.request_rates if v.request_rates is not None else wl.request_rates)]
    if wl.ramp_up and v.request_rates is None:
        levels.append(load_level(rate=wl.ramp_up.end_rps, ramp_from=wl.ramp_up.start_rps))
    return levels


def acceptance_curves(result: RunResult, spec: ExperimentSpec) -> list[ArmCurve]:
    """Per arm, acceptance per position pooled over every accepted cell and round.

    Each position is pooled over the cells that drafted that deep: a k-ladder can leave an arm's
    rounds at different k, and a shallower round says nothing about the deeper positions.
    """
    curves = []
    for arm in spec.arms:
        per_pos = pooled_positions(cell.window for launch in ok_rounds(result, arm.name) for cell in launch.cells
                                   if not cell.rejected)
        if per_pos:
            curves.append(ArmCurve(arm.name, len(per_pos), per_pos, decay(per_pos),
                                   tail_collapsed(per_pos, spec.verdict.tail_floor)))
    return curves


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def correctness(result: RunResult, spec: ExperimentSpec) -> tuple[list[Divergence], int]:
    """Greedy outputs must not change under speculation: every arm vs the baseline, and vs the
    no-spec control when there is one. Returns the divergences and the number of probes compared."""
    probes = {a.name: launches[0].probes for a in spec.arms
              if (launches := ok_rounds(result, a.name)) and launches[0].probes}
    controls = control_arms(spec)
    references = [spec.baseline] + [a.name for a in spec.arms if a.name in controls]
    found, compared, seen = [], 0, set()
    for ref in references:
        for arm in spec.arms:
            pair = frozenset((arm.name, ref))
            if arm.name == ref or arm.name not in probes or ref not in probes or pair in seen:
                continue
            seen.add(pair)
            for i, (mine, theirs) in enumerate(zip(probes[arm.name], probes[ref], strict=False)):
                compared += 1
                pos = first_divergence(mine, theirs)
                if pos is not None:
                    found.append(Divergence(arm.name, ref, i, pos))
    return found, compared


def _c1_figures(result: RunResult, arm: str) -> tuple[float, float] | None:
    """(decode tok/s, mean acceptance length) at the lowest concurrency, medians over rounds
    (closed-loop cells only: an open loop's in-flight count is not a concurrency)."""
    rows = [(c.decode_tok_s_median, c.window.mean_acceptance_length)
            for b in ok_rounds(result, arm) for c in b.cells
            if not c.rejected and c.concurrency is not None
            and c.concurrency == min(x.concurrency for x in b.cells if x.concurrency is not None)]
    present = [(d, m) for d, m in rows if d and m]
    if not present:
        return None
    return median(d for d, _ in present), median(m for _, m in present)


def cost_model(result: RunResult, spec: ExperimentSpec, curves: list[ArmCurve]
               ) -> tuple[dict[str, CostPrediction], list[CostRow]]:
    figures = {c.arm: f for c in curves if (f := _c1_figures(result, c.arm))}
    points = [(c.k, step_time_from(*figures[c.arm])) for c in curves if c.arm in figures]
    if not points:
        return {}, []
    model = fit_step_time(points)
    preds = {c.arm: predict_k(c.per_position, step_time_from(*figures[c.arm]), c.k,
                                    k_max=max(c.k for c in curves) + 2, step_model=model)
             for c in curves if c.arm in figures}
    rows = []
    base = preds.get(spec.baseline)
    for c in curves:
        if base is None or c.arm == spec.baseline or c.arm not in figures or c.k > len(base.rows):
            continue
        predicted = base.at(c.k).decode_tok_s
        measured = figures[c.arm][0]
        rows.append(CostRow(c.arm, c.k, measured, predicted, prediction_error(predicted, measured)))
    return preds, rows


def assess(result: RunResult, spec: ExperimentSpec, priors: Priors | None = None) -> Assessment:
    """The run's verdict. `priors`: stored per-round variances keyed (cell id or sequential.COMPOSITE,
    metric), e.g. from an A/A calibration; the decision pools each in only where the run agrees."""
    design = sequential_design(spec)
    arms = decisions(result, spec, priors)
    curves = acceptance_curves(result, spec)
    divergences, compared = correctness(result, spec)
    rule = VerdictRule(tail_floor=spec.verdict.tail_floor, require_gain=spec.verdict.require_gain)
    failures = [f"{d.arm} vs {d.reference}: probe {d.probe} differs from token {d.position}" for d in divergences]
    # The no-spec control is reported beside the spec arms; being slower is its job, not a regression.
    controls = control_arms(spec)
    judged = [ad for ad in arms if ad.arm not in controls]
    lead = spec.verdict.metrics[0]
    measured = {ad.comparison.keys[s.cell].level for ad in judged for s in ad.comparison.series
                if s.metric == lead and any(math.isfinite(v) for v in s.values)}
    missing = sorted(set(declared_levels(spec)) - measured) if judged else []
    verdict = experiment_verdict([(ad.arm, ad.decision) for ad in judged], [c.arm for c in curves if c.tail_collapsed],
                                 failures, missing, rule)
    cost, rows = cost_model(result, spec, curves)
    rounds = {a.name: len(ok_rounds(result, a.name)) for a in spec.arms}
    return Assessment(cell_verdicts(arms, design), verdict, arms, design, curves, divergences, compared, cost, rows,
                      rounds)


def control_arms(spec: ExperimentSpec) -> set[str]:
    """No-spec arms beside a speculating baseline. Where the baseline does not speculate either (an A/A of it,
    an image against an image), such an arm is a candidate like any other."""
    if spec.arm(spec.baseline).speculative is None:
        return set()
    return {a.name for a in spec.arms if a.speculative is None and a.name != spec.baseline}


def decision_records(assessment: Assessment, spec: ExperimentSpec) -> list[QualityRecord]:
    """The decision as rows of `quality_results`, beside the GE checks (controls: recorded, never failed)."""
    band = spec.thresholds.noise_band
    controls = control_arms(spec)
    out = []
    for cv in assessment.cells:
        ci = cv.ci
        control = cv.arm in controls
        out.append(QualityRecord(
            arm=cv.arm, round=None, cell=cv.key.id, concurrency=cv.key.concurrency, prompt_class=cv.key.prompt_class,
            check=f"control.ci.{cv.metric}" if control else f"regression.ci.{cv.metric}", metric=cv.metric,
            value=ci.estimate if ci else None, threshold=band,
            passed=control or cv.outcome != "regression", severity="regression",
            detail=f"{cv.outcome}: " + (f"{ci.estimate:+.1%} [{ci.low:+.1%}, {ci.high:+.1%}] over {ci.n_pairs} "
                                        "round(s)" if ci is not None and math.isfinite(ci.high)
                                        else "too few rounds for an interval"),
        ))
    for curve in assessment.curves:
        out.append(QualityRecord(
            arm=curve.arm, check="acceptance.tail_floor", metric=f"acceptance_pos_{curve.k - 1}",
            value=curve.per_position[-1], threshold=spec.verdict.tail_floor, passed=not curve.tail_collapsed,
            severity="regression", detail=f"last-position acceptance {curve.per_position[-1]:.3f} "
                                          f"(floor {spec.verdict.tail_floor:g}), decay {curve.decay or 0:.2f}",
        ))
    for d in assessment.divergences:
        out.append(QualityRecord(
            arm=d.arm, check="correctness.greedy_match", metric="first_divergence", value=d.position,
            passed=False, severity="regression",
            detail=f"probe {d.probe}: greedy output differs from {d.reference} at token {d.position}",
        ))
    return out
