"""From a run's blocks to a decision a team can act on: per-cell CIs, acceptance curves,
the greedy-output correctness gate, the cost model and the PROMOTE/REVERT/INCONCLUSIVE rule.

Pure: it reads a RunResult (from results.json or rebuilt from DuckDB) and the spec, so
`specwatch report` recomputes exactly what the flow decided.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import median

from specwatch import stats
from specwatch.records import ArmResult, QualityRecord, RunResult
from specwatch.spec import ExperimentSpec

METRIC = "decode_tok_s"
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
    cells: list[stats.CellVerdict]
    verdict: stats.Verdict
    curves: list[ArmCurve]
    divergences: list[Divergence]
    compared_probes: int
    cost: dict[str, stats.CostPrediction] = field(default_factory=dict)
    cost_rows: list[CostRow] = field(default_factory=list)
    blocks: dict[str, int] = field(default_factory=dict)


def _ok_blocks(result: RunResult, arm: str) -> list[ArmResult]:
    return sorted((a for a in result.arms if a.name == arm and a.status == "ok"), key=lambda a: a.block)


def _block_values(blocks: list[ArmResult], concurrency: int, prompt_class: str) -> dict[int, float]:
    """The replicate: one block median per launch; rejected cells are missing, never zero."""
    out = {}
    for arm in blocks:
        for cell in arm.cells:
            if (cell.concurrency, cell.prompt_class) == (concurrency, prompt_class) and not cell.rejected:
                if cell.decode_tok_s_median:
                    out[arm.block] = cell.decode_tok_s_median
    return out


def compare_cells(result: RunResult, spec: ExperimentSpec, confidence: float = 0.95) -> list[stats.CellVerdict]:
    base = _ok_blocks(result, spec.baseline)
    band = spec.thresholds.noise_band
    verdicts = []
    for arm in spec.arms:
        if arm.name == spec.baseline:
            continue
        cand = _ok_blocks(result, arm.name)
        for conc in spec.workload.concurrency:
            for pclass in spec.workload.prompt_classes:
                b, c = _block_values(base, conc, pclass), _block_values(cand, conc, pclass)
                # pair the i-th launch of each arm: adjacent in the counterbalanced order
                pairs = sorted(b.keys() & c.keys())
                ci = stats.relative_diff_ci([b[i] for i in pairs], [c[i] for i in pairs], confidence)
                verdicts.append(stats.CellVerdict.from_ci(arm.name, conc, pclass, METRIC, ci, band))
    return verdicts


def acceptance_curves(result: RunResult, spec: ExperimentSpec) -> list[ArmCurve]:
    curves = []
    for arm in spec.arms:
        drafts, accepted = 0.0, []
        for block in _ok_blocks(result, arm.name):
            for cell in block.cells:
                w = cell.window
                if cell.rejected or not w.num_drafts or not w.accepted_per_position:
                    continue
                drafts += w.num_drafts
                accepted = [a + b for a, b in zip(accepted, w.accepted_per_position)] if accepted \
                    else list(w.accepted_per_position)
        if drafts:
            per_pos = [a / drafts for a in accepted]
            curves.append(ArmCurve(arm.name, len(per_pos), per_pos, stats.decay(per_pos),
                                   stats.tail_collapsed(per_pos, spec.verdict.tail_floor)))
    return curves


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
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
            for i, (mine, theirs) in enumerate(zip(probes[arm.name], probes[ref])):
                compared += 1
                pos = first_divergence(mine, theirs)
                if pos is not None:
                    found.append(Divergence(arm.name, ref, i, pos))
    return found, compared


def _c1_figures(result: RunResult, arm: str) -> tuple[float, float] | None:
    """(decode tok/s, mean acceptance length) at the lowest concurrency, medians over blocks."""
    rows = [(c.decode_tok_s_median, c.window.mean_acceptance_length)
            for b in _ok_blocks(result, arm) for c in b.cells
            if not c.rejected and c.concurrency == min(x.concurrency for x in b.cells)]
    rows = [(d, m) for d, m in rows if d and m]
    if not rows:
        return None
    return median(d for d, _ in rows), median(m for _, m in rows)


def cost_model(result: RunResult, spec: ExperimentSpec, curves: list[ArmCurve]
               ) -> tuple[dict[str, stats.CostPrediction], list[CostRow]]:
    figures = {c.arm: f for c in curves if (f := _c1_figures(result, c.arm))}
    points = [(c.k, stats.step_time_from(*figures[c.arm])) for c in curves if c.arm in figures]
    if not points:
        return {}, []
    model = stats.fit_step_time(points)
    preds = {c.arm: stats.predict_k(c.per_position, stats.step_time_from(*figures[c.arm]), c.k,
                                    k_max=max(c.k for c in curves) + 2, step_model=model)
             for c in curves if c.arm in figures}
    rows = []
    base = preds.get(spec.baseline)
    for c in curves:
        if base is None or c.arm == spec.baseline or c.arm not in figures or c.k > len(base.rows):
            continue
        predicted = base.at(c.k).decode_tok_s
        measured = figures[c.arm][0]
        rows.append(CostRow(c.arm, c.k, measured, predicted, stats.prediction_error(predicted, measured)))
    return preds, rows


def assess(result: RunResult, spec: ExperimentSpec) -> Assessment:
    cells = compare_cells(result, spec, confidence_for(spec))
    curves = acceptance_curves(result, spec)
    divergences, compared = correctness(result, spec)
    rule = stats.VerdictRule(band=spec.thresholds.noise_band, tail_floor=spec.verdict.tail_floor,
                             require_gain=spec.verdict.require_gain)
    failures = [f"{d.arm} vs {d.reference}: probe {d.probe} differs from token {d.position}" for d in divergences]
    # The no-spec control is reported beside the spec arms; being slower is its job, not a regression.
    controls = control_arms(spec)
    verdict = stats.experiment_verdict(
        [c for c in cells if c.arm not in controls], [c.arm for c in curves if c.tail_collapsed], failures,
        spec.verdict.concurrency or spec.workload.concurrency, rule,
    )
    cost, rows = cost_model(result, spec, curves)
    blocks = {a.name: len(_ok_blocks(result, a.name)) for a in spec.arms}
    return Assessment(cells, verdict, curves, divergences, compared, cost, rows, blocks)


def control_arms(spec: ExperimentSpec) -> set[str]:
    return {a.name for a in spec.arms if a.speculative is None and a.name != spec.baseline}


def quality_records(assessment: Assessment, spec: ExperimentSpec) -> list[QualityRecord]:
    """The decision as rows of `quality_results`, beside the GE checks (controls: recorded, never failed)."""
    band = spec.thresholds.noise_band
    controls = control_arms(spec)
    out = []
    for cv in assessment.cells:
        ci = cv.ci
        finite = ci is not None and math.isfinite(ci.high)
        control = cv.arm in controls
        out.append(QualityRecord(
            arm=cv.arm, block=None, concurrency=cv.concurrency, prompt_class=cv.prompt_class,
            check="control.ci.decode_tok_s" if control else "regression.ci.decode_tok_s", metric=METRIC,
            value=ci.estimate if ci else None, threshold=band,
            passed=control or cv.outcome != "regression", severity="regression",
            detail=f"{cv.outcome}: " + (f"{ci.estimate:+.1%} [{ci.low:+.1%}, {ci.high:+.1%}] over {ci.n_pairs} block "
                                        f"pair(s)" if finite else "too few block pairs for an interval"),
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
