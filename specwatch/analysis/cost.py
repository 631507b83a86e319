"""Cost model for neighbouring k: tokens per step from the acceptance curve, step time fitted
over the arms, predicted decode tok/s per k.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class StepTimeModel:
    """Decode step time step(k) = a + b*k seconds; b is the verify/draft cost per extra position."""

    a: float
    b: float
    n_points: int

    def at(self, k: int) -> float:
        return self.a + self.b * k


def fit_step_time(points: Sequence[tuple[int, float]]) -> StepTimeModel:
    """Least-squares a + b*k over (k, step time) points from several arms.

    With one distinct k there is no slope to fit: constant step time (b = 0). A negative fitted
    slope is noise (verifying more positions cannot be cheaper), so it is clamped to 0.
    """
    if not points:
        raise ValueError("need at least one (k, step_time) point")
    ks = np.array([p[0] for p in points], dtype=float)
    ts = np.array([p[1] for p in points], dtype=float)
    if np.any(ts <= 0):
        raise ValueError("step times must be positive")
    if np.unique(ks).size < 2:
        return StepTimeModel(float(ts.mean()), 0.0, len(points))
    b, a = np.polyfit(ks, ts, 1)
    if b < 0:
        return StepTimeModel(float(ts.mean()), 0.0, len(points))
    return StepTimeModel(float(a), float(b), len(points))


def step_time_from(decode_tok_s: float, mean_acceptance_length: float) -> float:
    """Seconds per decode step = tokens per step / tokens per second.

    Use the per-stream decode rate: each running sequence advances one engine step at a time and
    gains `mean acceptance length` (1 + accepted/drafts) tokens per step.
    """
    if decode_tok_s <= 0 or mean_acceptance_length < 1:
        raise ValueError("need decode_tok_s > 0 and mean_acceptance_length >= 1")
    return mean_acceptance_length / decode_tok_s


@dataclass(frozen=True)
class KPrediction:
    k: int
    tokens_per_step: float
    step_time_s: float
    decode_tok_s: float
    extrapolated: bool  # k beyond the measured depth: acceptance of the extra positions is a fit


@dataclass(frozen=True)
class CostPrediction:
    rows: list[KPrediction]
    best_k: int
    k_measured: int
    tail_ratio: float  # fitted conditional acceptance ratio p_i / p_{i-1} used past k_measured
    step_model: StepTimeModel | None

    def at(self, k: int) -> KPrediction:
        for row in self.rows:
            if row.k == k:
                return row
        raise KeyError(k)


def _tail_ratio(p: NDArray[np.float64], tail_positions: int) -> float:
    # Acceptance falls faster deep in the draft (the DOMAIN curve's ratios go .92 .90 .90 .88 .80
    # .71), so the ratio is fitted on the deepest positions only: log p_i = alpha + i*log r by
    # least squares. Still optimistic if the ratios keep falling, hence `extrapolated` rows.
    if p[-1] <= 0:
        return 0.0
    if p.size == 1:
        # One position: fall back to the i.i.d. acceptance model (p_i = alpha^(i+1), r = alpha).
        return float(min(p[0], 1.0))
    tail = p[-min(tail_positions, p.size) :]
    tail = tail[tail > 0]
    if tail.size < 2:
        return 0.0
    slope = np.polyfit(np.arange(tail.size, dtype=float), np.log(tail), 1)[0]
    return float(min(math.exp(slope), 1.0))


def predict_k(
    per_position: Sequence[float],
    step_time_s: float,
    k_measured: int | None = None,
    k_max: int | None = None,
    step_model: StepTimeModel | None = None,
    tail_positions: int = 4,
) -> CostPrediction:
    """Predicted tokens per step and decode tok/s for k' = 1..k_max from one arm's measurements.

    per_position: marginal acceptance p_i = accepted_per_pos[i] / drafts, i = 0..k-1.
    Tokens per step at depth k' = 1 + sum_{i<k'} p_i (the bonus token plus each accepted
    position); this assumes the first k' drafted tokens do not depend on k, true for chain
    drafters. Past k the curve continues geometrically from the last measured position with the
    fitted tail ratio. Step time: the arm's measured step time, shifted along the slope of
    `step_model` (fit_step_time over several arms) to other k; constant without a model.
    Best k = highest predicted tok/s (ties go to the smaller k: less graph memory).
    """
    p = np.asarray(per_position, dtype=float)
    k = p.size if k_measured is None else int(k_measured)
    if p.size == 0 or p.size != k:
        raise ValueError(f"need one acceptance value per position 0..k-1 (k={k}, got {p.size})")
    if np.any((p < 0) | (p > 1)):
        raise ValueError("per-position acceptance must be within [0, 1]")
    if step_time_s <= 0:
        raise ValueError("step_time_s must be positive")
    # Counters make p non-increasing; enforce it so noise in a hand-entered curve cannot make
    # deeper positions look better than shallower ones.
    p = np.minimum.accumulate(p)
    k_max = k + 3 if k_max is None else int(k_max)
    if k_max < 1:
        raise ValueError("k_max must be >= 1")
    ratio = _tail_ratio(p, tail_positions)
    extra = p[-1] * ratio ** np.arange(1, max(k_max - k, 0) + 1)
    curve = np.concatenate([p, extra])[:k_max]
    slope = step_model.b if step_model is not None else 0.0
    rows = []
    for kk in range(1, k_max + 1):
        tokens = 1.0 + float(curve[:kk].sum())
        st = max(step_time_s + slope * (kk - k), 1e-12)
        rows.append(KPrediction(kk, tokens, st, tokens / st, kk > k))
    best = max(rows, key=lambda r: (r.decode_tok_s, -r.k))
    return CostPrediction(rows, best.k, k, ratio, step_model)


def prediction_error(predicted: float, measured: float) -> float:
    """Relative error of a prediction against a measurement (+0.05 = predicted 5 % too high)."""
    if measured <= 0:
        raise ValueError("measured value must be positive")
    return predicted / measured - 1.0
