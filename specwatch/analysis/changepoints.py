"""Change points in a series' history (one value per run), for `specwatch history`.

ruptures (PELT) proposes the split points; each is kept only if a Welch t-test between the
neighbouring segments gives p < max_pvalue (0.001 by default, as Apache Otava uses). Otava
itself pins numpy 2.2 and scipy < 1.17 and pulls cloud SDKs, which would downgrade this
stack, so ruptures + scipy do the same job here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import ruptures
from ruptures.costs import CostL2, NotEnoughPoints
from scipy import stats


class _SumsL2(CostL2):
    """ruptures' "l2" cost from running sums: each segment's cost in O(1) where CostL2 takes O(length), so a
    year of nightly points is searched in milliseconds, not the ~0.4 s a dashboard page cannot spend.
    Same cost (the squared deviation from the segment mean), same change points."""

    def fit(self, signal: np.ndarray) -> _SumsL2:
        super().fit(signal)
        x = self.signal.astype(float)
        self._sum = np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x, axis=0)])
        self._sq = np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x * x, axis=0)])
        return self

    def error(self, start: int, end: int) -> float:
        if end - start < self.min_size:
            raise NotEnoughPoints
        n = end - start
        total = self._sum[end] - self._sum[start]
        return float((self._sq[end] - self._sq[start] - total * total / n).sum())


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first point of the new regime
    before: float  # mean of the segment before
    after: float  # mean of the segment after
    pvalue: float

    @property
    def change(self) -> float:
        return self.after / self.before - 1 if self.before else float("nan")


def change_points(values: Sequence[float], min_size: int = 5, max_pvalue: float = 0.001) -> list[ChangePoint]:
    """Significant shifts in the mean; a series shorter than 2 * min_size has none to find.

    p-values are Bonferroni-corrected for the split positions the search could pick.
    """
    y = np.asarray(values, dtype=float)
    if y.size < 2 * min_size or np.allclose(y, y[0]):
        return []
    # Penalty on the standardised signal: BIC-like, log(n) per extra segment.
    z = (y - y.mean()) / (y.std() or 1.0)
    ends = ruptures.Pelt(custom_cost=_SumsL2(), min_size=min_size, jump=1).fit(z).predict(pen=3 * np.log(y.size))
    bounds = [0, *ends]
    # The split was chosen where the t statistic is largest: correct for the positions tried.
    tried = y.size - 2 * min_size + 1
    found = []
    for i in range(1, len(bounds) - 1):
        left, right = y[bounds[i - 1]:bounds[i]], y[bounds[i]:bounds[i + 1]]
        p = min(1.0, float(stats.ttest_ind(left, right, equal_var=False).pvalue) * tried)
        if p < max_pvalue:
            found.append(ChangePoint(bounds[i], float(left.mean()), float(right.mean()), p))
    return found


def trend(values: Sequence[float]) -> float | None:
    """Relative slope per run of a least-squares line (e.g. -0.01: 1% down per run)."""
    y = np.asarray(values, dtype=float)
    if y.size < 3 or not y.mean():
        return None
    slope = np.polyfit(np.arange(y.size, dtype=float), y, 1)[0]
    return float(slope / y.mean())
