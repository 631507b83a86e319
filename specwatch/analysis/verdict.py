"""From a run's blocks to a decision a team can act on: per-cell CIs, acceptance curves,
the greedy-output correctness gate, the cost model and the PROMOTE/REVERT/INCONCLUSIVE rule.

Pure: it reads a RunResult (from results.json or rebuilt from DuckDB) and the spec, so
`specwatch report` recomputes exactly what the flow decided.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import median

from specwatch.analysis.acceptance import decay, tail_collapsed
from specwatch.analysis.cost import CostPrediction, fit_step_time, predict_k, prediction_error, step_time_from
from specwatch.analysis.decision import CellVerdict, Verdict, VerdictRule, experiment_verdict
from specwatch.analysis.intervals import relative_diff_ci
from specwatch.analysis.metrics import METRICS
from specwatch.records import ArmResult, CellKey, QualityRecord, RunResult, load_level
from specwatch.spec import ExperimentSpec

# Adaptive stopping looks at the data after every block: each look uses a stricter interval so
# the whole design keeps the error rate of a fixed one (calibrated in benchmarks/adaptive_stopping.py).
ADAPTIVE_CONFIDENCE = 0.99


def confidence_for(spec: ExperimentSpec) -> float:
    return ADAPTIVE_CONFIDENCE if spec.design.adaptive else 0.95


@dataclass(frozen=True)
class ArmCurve:
    arm: str
    k: int
    per_position: list[float]  # pooled over every accepted cell and block: sum accepted_i / sum drafts
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
    curves: list[ArmCurve]
    divergences: list[Divergence]
    compared_probes: int
    cost: dict[str, CostPrediction] = field(default_factory=dict)
    cost_rows: list[CostRow] = field(default_factory=list)
    blocks: dict[str, int] = field(default_factory=dict)


def _ok_blocks(result: RunResult, arm: str) -> list[ArmResult]:
    return sorted((a for a in result.arms if a.name == arm and a.status == "ok"), key=lambda a: a.block)


def _block_values(blocks: list[ArmResult], key: CellKey, metric: str = "decode_tok_s") -> dict[int, float]:
    """The replicate: the metric's cell figure per launch; rejected cells are missing, never zero
    (nor is a figure of zero: the comparison is on log ratios)."""
    out = {}
    for arm in blocks:
        for cell in arm.cells:
            if cell.key == key and not cell.rejected and (value := METRICS[metric].value(cell)):
                out[arm.block] = value
    return out


def measured_keys(blocks: list[ArmResult]) -> list[CellKey]:
    """The cells these launches measured, in report order."""
    return sorted({c.key for b in blocks for c in b.cells}, key=CellKey.sort_key)


def compare_cells(result: RunResult, spec: ExperimentSpec, confidence: float = 0.95) -> list[CellVerdict]:
    base = _ok_blocks(result, spec.baseline)
    band = spec.thresholds.noise_band
    verdicts = []
    for arm in spec.arms:
        if arm.name == spec.baseline:
            continue
        cand = _ok_blocks(result, arm.name)
        for key in measured_keys(base + cand):
            for metric in spec.verdict.metrics:
                b, c = _block_values(base, key, metric), _block_values(cand, key, metric)
                # pair the i-th launch of each arm: adjacent in the counterbalanced order
                pairs = sorted(b.keys() & c.keys())
                ci = relative_diff_ci([b[i] for i in pairs], [c[i] for i in pairs], confidence)
                verdicts.append(CellVerdict.from_ci(arm.name, key, metric, ci, band, METRICS[metric].higher_is_better))
    return verdicts


def declared_levels(spec: ExperimentSpec) -> list[str]:
    """The load levels the verdict counts (CellKey.level): the declared ones, else every one the workload runs."""
    wl, v = spec.workload, spec.verdict
    levels = [load_level(concurrency=c) for c in v.concurrency or wl.concurrency]
    levels += [load_level(rate=r) for r in (v.request_rates if v.request_rates is not None else wl.request_rates)]
    if wl.ramp_up and v.request_rates is None:
        levels.append(load_level(rate=wl.ramp_up.end_rps, ramp_from=wl.ramp_up.start_rps))
    return levels


def acceptance_curves(result: RunResult, spec: ExperimentSpec) -> list[ArmCurve]:
    """Per arm, acceptance per position pooled over every accepted cell and block.

    Each position is pooled over the cells that drafted that deep: a k-ladder can leave an arm's
    blocks at different k, and a shallower block says nothing about the deeper positions.
    """
    curves = []
    for arm in spec.arms:
        drafts: list[float] = []
        accepted: list[float] = []
        for block in _ok_blocks(result, arm.name):
            for cell in block.cells:
                w = cell.window
                if cell.rejected or not w.num_drafts or not w.accepted_per_position:
                    continue
                for pos, value in enumerate(w.accepted_per_position):
                    if pos == len(accepted):
                        drafts.append(0.0)
                        accepted.append(0.0)
                    drafts[pos] += w.num_drafts
                    accepted[pos] += value
        if drafts:
            per_pos = [a / d for a, d in zip(accepted, drafts, strict=True)]
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
    probes = {a.name: blocks[0].probes for a in spec.arms
              if (blocks := _ok_blocks(result, a.name)) and blocks[0].probes}
    references = [spec.baseline] + [a.name for a in spec.arms if a.speculative is None and a.name != spec.baseline]
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
    """(decode tok/s, mean acceptance length) at the lowest concurrency, medians over blocks
    (closed-loop cells only: an open loop's in-flight count is not a concurrency)."""
    rows = [(c.decode_tok_s_median, c.window.mean_acceptance_length)
            for b in _ok_blocks(result, arm) for c in b.cells
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


def assess(result: RunResult, spec: ExperimentSpec) -> Assessment:
    cells = compare_cells(result, spec, confidence_for(spec))
    curves = acceptance_curves(result, spec)
    divergences, compared = correctness(result, spec)
    rule = VerdictRule(band=spec.thresholds.noise_band, tail_floor=spec.verdict.tail_floor,
                       require_gain=spec.verdict.require_gain, metrics=tuple(spec.verdict.metrics))
    failures = [f"{d.arm} vs {d.reference}: probe {d.probe} differs from token {d.position}" for d in divergences]
    # The no-spec control is reported beside the spec arms; being slower is its job, not a regression.
    controls = control_arms(spec)
    verdict = experiment_verdict(
        [c for c in cells if c.arm not in controls], [c.arm for c in curves if c.tail_collapsed], failures,
        declared_levels(spec), rule,
    )
    cost, rows = cost_model(result, spec, curves)
    blocks = {a.name: len(_ok_blocks(result, a.name)) for a in spec.arms}
    return Assessment(cells, verdict, curves, divergences, compared, cost, rows, blocks)


def control_arms(spec: ExperimentSpec) -> set[str]:
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
            arm=cv.arm, block=None, cell=cv.key.id, concurrency=cv.key.concurrency, prompt_class=cv.key.prompt_class,
            check=f"control.ci.{cv.metric}" if control else f"regression.ci.{cv.metric}", metric=cv.metric,
            value=ci.estimate if ci else None, threshold=band,
            passed=control or cv.outcome != "regression", severity="regression",
            detail=f"{cv.outcome}: " + (f"{ci.estimate:+.1%} [{ci.low:+.1%}, {ci.high:+.1%}] over {ci.n_pairs} block "
                                        "pair(s)" if ci is not None and math.isfinite(ci.high)
                                        else "too few block pairs for an interval"),
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
