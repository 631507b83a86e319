"""A sweep's points (one per arm and depth) and the steps between neighbouring depths that the
checks judge: decode is expected to fall with depth (seed 004: ~16% per doubling), and a drop
larger than `cliff_drop` beyond the two points' intervals is a cliff.

The steps and the per-doubling fit read a point's trend decode: without a speculating arm's looping
runs, whose decode a loop inflates as it inflates their acceptance. Otherwise a looping 4K against a
clean 8K reads as a cliff that is content, not depth (benchmarks/README.md section 10, run 1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from specwatch.analysis.intervals import mean_ci

MIN_ROUNDS_FOR_INTERVAL = 3


def nullable(value: Any) -> float | None:
    """A nullable view column's value (pandas gives NaN for NULL)."""
    return None if value is None or pd.isna(value) else float(value)


@dataclass(frozen=True)
class SweepPoint:
    arm: str
    depth: int
    cell: str
    runs: int
    decode_tok_s: float | None  # mean of round medians (fewer than 3 rounds: mean of all runs)
    decode_ci: float  # half-width of its 95% t-interval (0 without spread)
    trend_decode_tok_s: float | None  # the same without a speculating arm's looping runs
    trend_decode_ci: float
    ttft_s: float | None
    prefill_tok_s: float | None
    mean_acceptance_length: float | None  # runs that did not loop only
    looped_acceptance_length: float | None  # the looping runs' (inflated) figure
    loop_runs: int
    repetition_ratio: float | None
    prompt_repetition_ratio: float | None
    skip_reason: str | None

    @property
    def looped(self) -> bool:
        return self.loop_runs > 0

    @property
    def acceptance_shown(self) -> float | None:
        """The acceptance a plot shows: the clean runs', else the looping runs' (drawn hollow)."""
        return self.mean_acceptance_length if self.mean_acceptance_length is not None \
            else self.looped_acceptance_length


def points_from(frame: pd.DataFrame) -> list[SweepPoint]:
    """Rows of sql/checks/sweep_points.sql as points.

    The interval is over round medians from 3 rounds on (restart noise included); below that over all
    runs pooled: a t-interval of 2 round medians is 12.7 standard errors wide and could flag nothing.
    """
    out = []
    for row in frame.itertuples():
        decode, ci = _decode(list(row.round_decodes), list(row.run_decodes))
        trend, trend_ci = _decode(list(row.trend_round_decodes), list(row.trend_run_decodes))
        out.append(SweepPoint(
            arm=str(row.arm), depth=int(row.depth), cell=str(row.cell), runs=int(row.runs), decode_tok_s=decode,
            decode_ci=ci, trend_decode_tok_s=trend, trend_decode_ci=trend_ci, ttft_s=nullable(row.ttft_s),
            prefill_tok_s=nullable(row.prefill_tok_s),
            mean_acceptance_length=nullable(row.mean_acceptance_length),
            looped_acceptance_length=nullable(row.looped_acceptance_length), loop_runs=int(row.loop_runs),
            repetition_ratio=nullable(row.repetition_ratio),
            prompt_repetition_ratio=nullable(row.prompt_repetition_ratio),
            skip_reason=row.skip_reason if isinstance(row.skip_reason, str) else None,
        ))
    return out


def _decode(rounds: list[float], runs: list[float]) -> tuple[float | None, float]:
    values = rounds if len(rounds) >= MIN_ROUNDS_FOR_INTERVAL else runs
    return mean_ci(values) if values else (None, 0.0)


@dataclass(frozen=True)
class Step:
    """Two neighbouring measured depths of one arm. `min_rise`: the smallest rise in decode tok/s the
    intervals allow (> 0: it rose beyond them); `min_drop`: the smallest drop they allow."""

    arm: str
    shallow: SweepPoint
    deep: SweepPoint

    @property
    def drop(self) -> float:
        assert self.shallow.trend_decode_tok_s and self.deep.trend_decode_tok_s is not None
        return 1.0 - self.deep.trend_decode_tok_s / self.shallow.trend_decode_tok_s

    @property
    def min_rise(self) -> float:
        s, d = self.shallow, self.deep
        assert s.trend_decode_tok_s is not None and d.trend_decode_tok_s is not None
        return (d.trend_decode_tok_s - d.trend_decode_ci) / (s.trend_decode_tok_s + s.trend_decode_ci) - 1.0

    @property
    def min_drop(self) -> float:
        s, d = self.shallow, self.deep
        assert s.trend_decode_tok_s is not None and d.trend_decode_tok_s is not None
        low = s.trend_decode_tok_s - s.trend_decode_ci
        return 0.0 if low <= 0 else max(0.0, 1.0 - (d.trend_decode_tok_s + d.trend_decode_ci) / low)


def measured(points: Sequence[SweepPoint], arm: str) -> list[SweepPoint]:
    """An arm's points with a trend decode, by depth: what the steps and the fit compare."""
    return sorted((p for p in points if p.arm == arm and p.trend_decode_tok_s), key=lambda p: p.depth)


def steps(points: Sequence[SweepPoint]) -> list[Step]:
    out = []
    for arm in dict.fromkeys(p.arm for p in points):
        ms = measured(points, arm)
        out += [Step(arm, a, b) for a, b in zip(ms, ms[1:], strict=False)]
    return out


def change_per_doubling(points: Sequence[SweepPoint], arm: str) -> float | None:
    """Decode tok/s change per doubling of depth, from a log-log fit (-0.16: 16% slower each doubling)."""
    ms = measured(points, arm)
    if len(ms) < 2:
        return None
    slope = np.polyfit([math.log2(p.depth) for p in ms], [math.log(p.trend_decode_tok_s or 1.0) for p in ms], 1)[0]
    return float(math.exp(slope) - 1.0)
