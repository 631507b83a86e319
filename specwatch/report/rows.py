"""The verdict table: one row per (arm, measured cell), as the CLI, the report and the Prefect
table artifact show it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median

from specwatch.analysis.decision import CellVerdict
from specwatch.analysis.metrics import METRICS
from specwatch.analysis.verdict import Assessment, declared_levels, measured_keys
from specwatch.records import CellKey, RunResult
from specwatch.spec import ExperimentSpec

NO_INTERVAL = "no interval yet"


@dataclass(frozen=True)
class VerdictRow:
    arm: str
    k: int | None
    key: CellKey
    rounds: int
    decode_tok_s: float | None  # median of the round medians
    delta_pct: float | None
    ci_pct: str
    ttft_s: float | None
    mean_acceptance_length: float | None
    verdict: str

    @property
    def concurrency(self) -> int | None:
        return self.key.concurrency

    @property
    def prompt_class(self) -> str:
        return self.key.prompt_class

    def table_row(self) -> dict[str, object]:
        """Flat and rounded, for a Prefect table artifact."""
        row: dict[str, object] = {"arm": self.arm, "k": self.k, "cell": self.key.id, "concurrency": self.concurrency,
                                  "prompt_class": self.prompt_class}
        for name in ("rounds", "decode_tok_s", "delta_pct", "ci_pct", "ttft_s", "mean_acceptance_length", "verdict"):
            value = getattr(self, name)
            row[name] = round(value, 3) if isinstance(value, float) else value
        return row


def _band_outcome(delta: float | None, band: float) -> str:
    """Single boot: no interval exists, so the noise band alone classifies (marked as such)."""
    if delta is None:
        return "n/a"
    return "gain (1 boot)" if delta > band else "regression (1 boot)" if delta < -band else "flat (1 boot)"


def _med(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return median(present) if present else None


def verdict_rows(result: RunResult, spec: ExperimentSpec, assessment: Assessment) -> list[VerdictRow]:
    band = spec.thresholds.noise_band
    cis = {(c.arm, c.key): c for c in assessment.cells if c.metric == "decode_tok_s"}  # this table's metric
    invalid = {(q.arm, q.cell) for q in result.quality if q.severity == "invalid" and not q.passed}
    judged = set(declared_levels(spec))
    decode_of: dict[tuple[str, str], float | None] = {}
    rows = []
    for arm in spec.arms:
        launches = [a for a in result.arms if a.name == arm.name and a.status == "ok"]
        for key in measured_keys(launches):
            cells = [c for a in launches for c in a.cells if c.key == key]
            kept = [c for c in cells if not c.rejected]
            decode = _med([c.decode_tok_s_median for c in kept])
            decode_of[(arm.name, key.id)] = decode
            base = decode_of.get((spec.baseline, key.id))
            cv = cis.get((arm.name, key))
            ci, delta, ci_text = cv.ci if cv else None, None, "-"
            if ci is not None and math.isfinite(ci.high):
                delta, ci_text = ci.estimate, f"[{ci.low * 100:+.1f}, {ci.high * 100:+.1f}]"
            elif arm.name != spec.baseline and base and decode:
                delta, ci_text = decode / base - 1, NO_INTERVAL
            if not kept:
                verdict = "rejected"
            elif (arm.name, key.id) in invalid:
                verdict = "invalid"
            elif arm.name == spec.baseline:
                verdict = "baseline"
            elif key.level not in judged:  # the decision judges the declared levels only
                verdict = "not judged"
            elif cv is not None and cv.ci is not None and cv.ci.n_pairs >= 2:
                verdict = cv.outcome
            else:
                verdict = _band_outcome(delta, band)
            rows.append(VerdictRow(
                arm=arm.name, k=next((a.k for a in launches), arm.k), key=key, rounds=len(kept), decode_tok_s=decode,
                delta_pct=None if delta is None else delta * 100, ci_pct=ci_text,
                ttft_s=_med([c.ttft_s_median for c in kept]),
                mean_acceptance_length=_med([c.window.mean_acceptance_length for c in kept]), verdict=verdict,
            ))
    return rows


@dataclass(frozen=True)
class MetricRow:
    """One judged metric of one candidate cell (`verdict.metrics`), with its direction."""

    arm: str
    key: CellKey
    metric: str
    unit: str
    better: str  # "higher" or "lower"
    baseline: float | None  # median over rounds
    value: float | None
    ci_pct: str
    outcome: str


def metric_rows(result: RunResult, spec: ExperimentSpec, assessment: Assessment) -> list[MetricRow]:
    def med(arm: str, cv: CellVerdict) -> float | None:
        metric = METRICS[cv.metric]
        return _med([metric.value(c) for a in result.arms if a.name == arm and a.status == "ok"
                     for c in a.cells if c.key == cv.key and not c.rejected])

    rows = []
    for cv in assessment.cells:
        ci = cv.ci
        text = f"{ci.estimate * 100:+.1f} [{ci.low * 100:+.1f}, {ci.high * 100:+.1f}]" if ci is not None and \
            math.isfinite(ci.high) else NO_INTERVAL if ci is not None else "-"
        metric = METRICS[cv.metric]
        rows.append(MetricRow(cv.arm, cv.key, cv.metric, metric.unit, "higher" if metric.higher_is_better else "lower",
                              med(spec.baseline, cv), med(cv.arm, cv), text, cv.outcome))
    return rows


def headline(result: RunResult, assessment: Assessment) -> str:
    status = {0: "", 3: "; a regression flagged", 4: "; incomplete: an arm failed or cells were rejected"}
    return f"{assessment.verdict.decision}{status[result.exit_code()]}"
