"""The sequential A/B decision over rounds (issue 22): PROMOTE, REVERT, NO CHANGE, INCONCLUSIVE, or
CONTINUE while undecided with rounds left.

A round is one launch of each arm; it is the unit of replication (measurement rule 7). The input is,
per cell and judged metric, one paired value per completed round: log(candidate / baseline) of the
round's cell summary, direction-normalised so that + is better. NaN marks a rejected cell.

Method: a group-sequential t-test with alpha spending, read as repeated confidence intervals.
- Looks at every round from `min_rounds` to `max_rounds`. Look n gets the one-sided error
  alpha * ((n/N)^rho - ((n-1)/N)^rho) (power-family spending, N = max_rounds; the first look gets
  alpha * (min/N)^rho). Each look's interval is an exact t-interval; by the union bound over looks
  the chance that any look's interval misses the truth on one side is at most alpha. That is
  conservative (the looks are correlated), so the error rates benchmarks/sequential_error_rates.py
  measures are below alpha, and it needs no boundary tables and no normal approximation at 3-10
  rounds with a learned variance.
- The band is symmetric on the log scale, +-L with L = -log(1 - band): both +band and -band
  relative lie inside it, so a swap of candidate and baseline mirrors every call.
- PROMOTE: the composite interval (mean over cells of the lead metric, per round) lies above +L,
  and every cell of every metric is shown non-inferior (its interval above -cell_margin): an
  intersection-union veto, so it needs no multiplicity correction, and a k7-like pattern (+5% at
  c=1, -14% at c=64) cannot promote on the average.
- REVERT: a composite interval below -L, or one cell's interval below -cell_margin at half the
  look's alpha split over the cells (Bonferroni: several cells could each trip it by chance). The
  half keeps a wrong REVERT within 1.5 alpha when both routes err; the composite keeps the full
  alpha so that PROMOTE and REVERT mirror.
- NO CHANGE: every composite inside +-L and every cell inside +-cell_margin (equivalence, TOST
  read off the same intervals): the futility/equivalence stop.
- A call that is wrong (PROMOTE with a true composite <= +band, NO CHANGE with a composite outside
  the band, REVERT with every true effect >= -band) therefore happens in at most alpha of runs
  (REVERT: 1.5 alpha), whatever round the run stops at: the intervals hold simultaneously over all
  looks. Exactly so for normal round values and the run's own variance; with a prior pooled in,
  as far as the prior is right, which is what the F check below guards.
- INCONCLUSIVE (the maximum reached) comes with the rounds after which the composite, at its
  estimate and variance, would be called with 50% chance (`rounds_needed`, which also serves
  `validate --plan`).

Variance: a paired per-round sd measured before the run (A/A calibration) is pooled with the run's
own only when the pooled degrees of freedom reach `min_pooled_df` and an F test of the run's
variance against it rejects on neither side (the noisier side at a liberal level); the t reference
then has prior + current df. Without a usable prior, no call comes before 3 rounds (measurement rule 7).
The simulation (benchmarks/sequential_error_rates.py) measures the rates when the prior is off 2x.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, NoReturn

import numpy as np
from numpy.typing import NDArray
from scipy import stats

Outcome = Literal["PROMOTE", "REVERT", "NO CHANGE", "INCONCLUSIVE", "CONTINUE"]
OUTCOMES: tuple[Outcome, ...] = ("PROMOTE", "REVERT", "NO CHANGE", "INCONCLUSIVE", "CONTINUE")
COMPOSITE = "composite"  # the cell name of a metric's composite in the results (reserved)
OWN_VARIANCE_MIN_ROUNDS = 3  # measurement rule 7: the floor for a test that learns its variance from the run
_PLAN_CAP = 10_000  # rounds: beyond this a plan says "not reachable"


@dataclass(frozen=True)
class PriorVariance:
    """A paired per-round sd of the log-ratio measured before the run, e.g. by an A/A calibration."""

    sd: float
    df: int
    source: str


@dataclass(frozen=True)
class SequentialDesign:
    """How a run decides: the error of each call, the band, the rounds allowed, the spending."""

    alpha: float = 0.05  # one-sided error of each call (PROMOTE, REVERT, NO CHANGE)
    band: float = 0.05  # the practical band: an effect within +-band is no change
    min_rounds: int = 3
    max_rounds: int = 10
    cell_margin: float | None = None  # per-cell non-inferiority / equivalence margin; None: the band
    # Power-family spending exponent: 1 Pocock-like, 3 O'Brien-Fleming-like. 2 keeps early looks, whose
    # t reference has 2-3 df without a prior, from spending much (their heavy tails made wrong-direction
    # calls at rho 1), and still lets a run with a prior decide at 2-3 rounds (sequential_error_rates.py).
    spending_rho: float = 2.0
    min_pooled_df: int = 6  # a prior is used only when prior + current df reach this
    # The F test that drops a prior the run disagrees with, per side. A run noisier than its prior is
    # the dangerous side (pooling would narrow the intervals: wrong calls), so it is checked at a
    # liberal level; a quieter run only costs rounds.
    check_noisier_alpha: float = 0.25
    check_quieter_alpha: float = 0.05

    def __post_init__(self) -> None:
        def bad(name: str, value: object, fix: str) -> NoReturn:
            raise ValueError(f"design.{name}={value!r}: {fix}")

        if not 0 < self.alpha < 0.5:
            bad("alpha", self.alpha, "must lie in (0, 0.5); fix: use e.g. 0.05")
        if not 0 < self.band < 1:
            bad("band", self.band, "must lie in (0, 1); fix: use e.g. 0.05 for +-5%")
        if self.min_rounds < 1:
            bad("min_rounds", self.min_rounds, "must be >= 1; fix: use 3, or fewer only with a prior variance")
        if self.max_rounds < self.min_rounds:
            bad("max_rounds", self.max_rounds, f"is below min_rounds={self.min_rounds}; fix: set max_rounds >= "
                f"{self.min_rounds}")
        if self.cell_margin is not None and not self.band <= self.cell_margin < 1:
            bad("cell_margin", self.cell_margin, f"must lie in [band={self.band}, 1); fix: use the band or wider")
        if not self.spending_rho > 0:
            bad("spending_rho", self.spending_rho, "must be > 0; fix: use 1 (Pocock-like) to 3 (OBF-like)")
        if self.min_pooled_df < 1:
            bad("min_pooled_df", self.min_pooled_df, "must be >= 1; fix: use e.g. 6")
        for name in ("check_noisier_alpha", "check_quieter_alpha"):
            if not 0 < getattr(self, name) < 1:
                bad(name, getattr(self, name), "must lie in (0, 1); fix: use e.g. 0.25 / 0.05")

    @property
    def margin(self) -> float:
        return self.band if self.cell_margin is None else self.cell_margin


def log_band(band: float) -> float:
    """The half-width of the symmetric log-scale band: +-band relative both lie inside it."""
    return -math.log1p(-band)


def look_alpha(design: SequentialDesign, n: int) -> float:
    """One-sided error spent at the look after round n (0 before min_rounds or past max_rounds)."""
    if n < design.min_rounds or n > design.max_rounds:
        return 0.0
    def spent(r: int) -> float:
        return design.alpha * (r / design.max_rounds) ** design.spending_rho

    return spent(n) - (spent(n - 1) if n > design.min_rounds else 0.0)


def cell_alarm_alpha(look: float, cells: int) -> float:
    """One-sided alpha of a single cell's regression alarm at a look that spends `look`."""
    return look / (2 * cells)


@dataclass(frozen=True)
class VarianceUsed:
    """The per-round sd an interval rests on, its t reference df, and where it came from."""

    sd: float
    df: int
    source: str
    prior_used: bool = False


def pool_variance(own_var: NDArray[np.float64], own_df: int, prior: PriorVariance | None,
                  design: SequentialDesign) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.bool_]]:
    """(variance, df, prior used) per element of own_var: the prior pooled in where it is usable.

    Usable: prior + own df reach min_pooled_df, and (when the run has df to check with) the F test
    of the run's variance against the prior rejects on neither side. Otherwise the
    run's own variance (df 0: none, NaN). Vectorised for the simulation.
    """
    own_var = np.asarray(own_var, dtype=float)
    own = np.where(own_df > 0, own_var, np.nan)
    dfs = np.full(own_var.shape, own_df, dtype=np.int64)
    if prior is None or prior.df < 1 or not prior.sd > 0 or prior.df + own_df < design.min_pooled_df:
        return own, dfs, np.zeros(own_var.shape, dtype=bool)
    prior_var = prior.sd**2
    if own_df > 0:
        f = own_var / prior_var
        agree = ((stats.f.sf(f, own_df, prior.df) >= design.check_noisier_alpha)
                 & (stats.f.cdf(f, own_df, prior.df) >= design.check_quieter_alpha))
    else:
        agree = np.ones(own_var.shape, dtype=bool)
    pooled = (prior.df * prior_var + own_df * np.nan_to_num(own_var)) / (prior.df + own_df)
    return np.where(agree, pooled, own), np.where(agree, prior.df + own_df, dfs), agree


def variance_used(values: Sequence[float], prior: PriorVariance | None,
                  design: SequentialDesign) -> VarianceUsed | None:
    """The variance a unit's interval uses, with its source; None when there is none yet."""
    x = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    own_df = max(x.size - 1, 0)
    own_var = float(np.var(x, ddof=1)) if own_df else math.nan
    var, df, used = (float(a) for a in pool_variance(np.asarray(own_var), own_df, prior, design))
    if not math.isfinite(var):
        return None
    own_sd = f"{math.sqrt(own_var):.3f}" if own_df else "n/a"
    if prior is None:
        return VarianceUsed(math.sqrt(var), int(df), f"this run (sd {own_sd}, df {own_df}); no stored A/A "
                            "variance matches this cell, metric, platform, hardware, image and model")
    stored = f"{prior.source} (sd {prior.sd:.3f}, df {prior.df})"
    if used:
        return VarianceUsed(math.sqrt(var), int(df), f"pooled: {stored} + this run (sd {own_sd}, df {own_df})", True)
    why = "too few pooled df" if prior.df + own_df < design.min_pooled_df else "disagrees (F test)"
    return VarianceUsed(math.sqrt(var), int(df), f"this run (sd {own_sd}, df {own_df}); prior {stored} {why}")


@dataclass(frozen=True)
class Interval:
    """Relative effect (0.08 = 8% better) with the look's repeated confidence interval."""

    estimate: float
    low: float
    high: float


@dataclass(frozen=True)
class UnitResult:
    """One cell (or a metric's composite) at this look."""

    cell: str  # a cell key, or COMPOSITE
    metric: str
    rounds: int  # rounds with a value
    interval: Interval | None  # None: no variance yet
    variance: VarianceUsed | None


@dataclass(frozen=True)
class SequentialDecision:
    """What a run decided after `rounds` rounds, with everything a report states about it."""

    outcome: Outcome
    rounds: int
    composite: UnitResult  # the lead metric's composite
    cells: tuple[UnitResult, ...]  # every cell of every metric, then the other metrics' composites
    test: str
    reason: str
    more_rounds: int | None = None  # INCONCLUSIVE: about how many more rounds would likely decide

    @property
    def variance(self) -> VarianceUsed | None:
        return self.composite.variance


@dataclass(frozen=True)
class CellSeries:
    """One cell and metric: the paired log-ratio per completed round (+ is better; NaN: rejected)."""

    cell: str
    metric: str
    values: tuple[float, ...]
    prior: PriorVariance | None = None


@dataclass(frozen=True)
class _Estimate:
    """A unit's mean log-ratio at this look and what its interval rests on."""

    result: UnitResult
    mean: float
    n: int

    def bounds(self, alpha: float) -> tuple[float, float]:
        """Log-scale interval at one-sided alpha; infinite without a variance, or with the run's own
        variance before 3 rounds (measurement rule 7)."""
        var = self.result.variance
        if self.n == 0 or var is None or alpha <= 0 or (not var.prior_used and self.n < OWN_VARIANCE_MIN_ROUNDS):
            return -math.inf, math.inf
        half = float(stats.t.ppf(1 - alpha, var.df)) * var.sd / math.sqrt(self.n)
        return self.mean - half, self.mean + half


def _estimate(cell: str, metric: str, values: Sequence[float], prior: PriorVariance | None,
              design: SequentialDesign, alpha: float) -> _Estimate:
    x = [v for v in values if math.isfinite(v)]
    var = variance_used(x, prior, design)
    if not x:
        return _Estimate(UnitResult(cell, metric, 0, None, var), math.nan, 0)
    mean = float(np.mean(x))
    est = _Estimate(UnitResult(cell, metric, len(x), None, var), mean, len(x))
    lo, hi = est.bounds(alpha)
    interval = Interval(math.expm1(mean), math.expm1(lo), math.expm1(hi))
    return _Estimate(UnitResult(cell, metric, len(x), interval, var), mean, len(x))


def _composite_values(series: Sequence[CellSeries]) -> tuple[float, ...]:
    # A round counts only when every cell has a value: dropping a slow cell would move the mean.
    rows = np.array([s.values for s in series], dtype=float)
    return tuple(float(np.mean(col)) if np.all(np.isfinite(col)) else math.nan for col in rows.T)


def _check(series: Sequence[CellSeries], design: SequentialDesign, lead_metric: str | None) -> str:
    if not series:
        raise ValueError("series=[]: no cells to judge; fix: pass one CellSeries per cell and metric")
    lengths = {len(s.values) for s in series}
    if len(lengths) != 1:
        raise ValueError(f"series lengths={sorted(lengths)}: every cell needs one value per completed round; "
                         "fix: pad a rejected cell's round with NaN")
    if (n := lengths.pop()) > design.max_rounds:
        raise ValueError(f"rounds={n} exceeds design.max_rounds={design.max_rounds}; fix: judge the first "
                         f"{design.max_rounds} rounds (first_call), or raise max_rounds before the run")
    keys = [(s.cell, s.metric) for s in series]
    if len(set(keys)) != len(keys):
        raise ValueError("series: a (cell, metric) appears twice; fix: pass each once")
    if any(s.cell == COMPOSITE for s in series):
        raise ValueError(f"series cell={COMPOSITE!r} is reserved; fix: rename the cell")
    for s in series:
        if any(math.isinf(v) for v in s.values):
            raise ValueError(f"series {s.cell}/{s.metric} values={s.values}: infinite log-ratio; fix: a zero is a "
                             "failed cell, pass NaN")
    lead = lead_metric or series[0].metric
    if lead not in {s.metric for s in series}:
        raise ValueError(f"lead_metric={lead!r} has no series; fix: use one of {sorted({s.metric for s in series})}")
    return lead


def decide(series: Sequence[CellSeries], design: SequentialDesign,
           composite_priors: Mapping[str, PriorVariance] | None = None,
           lead_metric: str | None = None) -> SequentialDecision:
    """The decision after the rounds completed so far (the length of every series' values).

    composite_priors: per metric, the prior variance of that metric's composite (an A/A stores it
    beside the cells'; the composite's variance includes the cells' covariance, which per-cell
    priors do not give). lead_metric (default: the first series' metric) is the one whose
    composite must gain; the other metrics' composites are guarded like cells, at the band.
    """
    lead = _check(series, design, lead_metric)
    priors = composite_priors or {}
    n = len(series[0].values)
    a = look_alpha(design, n)
    metrics = list(dict.fromkeys(s.metric for s in series))
    comps = {m: _estimate(COMPOSITE, m, _composite_values([s for s in series if s.metric == m]), priors.get(m),
                          design, a) for m in metrics}
    cells = [_estimate(s.cell, s.metric, s.values, s.prior, design, a) for s in series]
    others = [comps[m] for m in metrics if m != lead]
    L, M = log_band(design.band), log_band(design.margin)
    test = (f"group-sequential paired t over rounds, power-family alpha spending (rho {design.spending_rho:g}, union "
            f"bound over looks), one-sided alpha {design.alpha:g} per call; look {n} of "
            f"{design.min_rounds}..{design.max_rounds} spends {a:.4f} per side; composite = mean over "
            f"{sum(s.metric == lead for s in series)} cell(s) of {lead}; cells: non-inferiority at "
            f"-{design.margin:.0%}, regression alarm at alpha/2 split over {len(cells)}")
    lead_est = comps[lead]

    def result(outcome: Outcome, reason: str, more: int | None = None) -> SequentialDecision:
        return SequentialDecision(outcome, n, lead_est.result, tuple(e.result for e in cells + others), test,
                                  reason, more)

    if a == 0.0:
        return result("CONTINUE", f"{n} of the minimum {design.min_rounds} rounds done")
    lead_lo = lead_est.bounds(a)[0]
    # REVERT: a composite below the band, or one cell below its margin (the regression alarm).
    worse = [f"{_label(e.result)} {_fmt(e.result)} below -{design.band:.0%}"
             for e in [lead_est, *others] if e.bounds(a)[1] < -L]
    a_cell = cell_alarm_alpha(a, len(cells))
    worse += [f"{_label(e.result)} below -{design.margin:.0%} at one-sided {a_cell:.4f}: {_fmt(e.result)}"
              for e in cells if e.bounds(a_cell)[1] < -M]
    if worse:
        return result("REVERT", "; ".join(worse))
    vetoed = [e.result for e in cells if e.bounds(a)[0] <= -M] + [e.result for e in others if e.bounds(a)[0] <= -L]
    if lead_lo > L and not vetoed:
        return result("PROMOTE", f"{_label(lead_est.result)} {_fmt(lead_est.result)} above +{design.band:.0%}, "
                                 f"every cell non-inferior (above -{design.margin:.0%})")
    if (all(lo >= -L and hi <= L for lo, hi in (e.bounds(a) for e in comps.values()))
            and all(lo >= -M and hi <= M for lo, hi in (e.bounds(a) for e in cells))):
        return result("NO CHANGE", f"{_label(lead_est.result)} {_fmt(lead_est.result)} inside +-{design.band:.0%}, "
                                   f"every cell inside +-{design.margin:.0%}")
    if lead_lo > L:
        why = (f"{_label(lead_est.result)} {_fmt(lead_est.result)} above +{design.band:.0%}, but not shown "
               f"non-inferior: " + ", ".join(f"{_label(u)} {_fmt(u)}" for u in vetoed))
    else:
        why = f"{_label(lead_est.result)} {_fmt(lead_est.result)} not yet clear of the +-{design.band:.0%} band"
    if n < design.max_rounds:
        return result("CONTINUE", why)
    return result("INCONCLUSIVE", f"maximum of {design.max_rounds} rounds reached; {why}",
                  _more_rounds(lead_est.result, design))


def first_call(series: Sequence[CellSeries], design: SequentialDesign,
               composite_priors: Mapping[str, PriorVariance] | None = None,
               lead_metric: str | None = None) -> SequentialDecision:
    """The decision at the first round that decided (or at the last round given): what a run that
    adds rounds only while undecided would have stopped with. Later rounds never change it."""
    total = len(series[0].values) if series else 0
    for n in range(1, total + 1):
        got = decide([CellSeries(s.cell, s.metric, s.values[:n], s.prior) for s in series], design,
                     composite_priors, lead_metric)
        if got.outcome != "CONTINUE" or n == total:
            return got
    return decide(series, design, composite_priors, lead_metric)


def _label(u: UnitResult) -> str:
    return f"{u.metric} {u.cell}"


def _fmt(u: UnitResult) -> str:
    if u.interval is None:
        return "(no rounds)"
    i = u.interval
    if not math.isfinite(i.high):
        return f"{i.estimate:+.1%} (no interval yet, n={u.rounds})"
    return f"{i.estimate:+.1%} [{i.low:+.1%}, {i.high:+.1%}] n={u.rounds}"


def final_look_power(sd: float, df_extra: int, design: SequentialDesign, effect: float, rounds: int) -> float:
    """Chance that the look after `rounds` (the last of a design with max_rounds = rounds) calls a true
    relative `effect`: PROMOTE / REVERT in its direction outside the band, NO CHANGE inside it.
    Earlier looks can only add to it, so this is a floor. df_extra: prior df pooled in."""
    d = replace(design, min_rounds=min(design.min_rounds, rounds), max_rounds=rounds)
    df = rounds - 1 + df_extra
    if df < 1 or (df_extra == 0 and rounds < OWN_VARIANCE_MIN_ROUNDS):
        return 0.0
    crit = float(stats.t.ppf(1 - look_alpha(d, rounds), df))
    se = sd / math.sqrt(rounds)
    L, delta = log_band(design.band), math.log1p(effect)
    if abs(delta) > L:
        return float(stats.nct.sf(crit, df, (abs(delta) - L) / se))
    # equivalence: both one-sided tests pass; the sd is treated as known here
    return float(max(0.0, stats.norm.cdf((L - delta) / se - crit) - stats.norm.cdf((-L - delta) / se + crit)))


def rounds_needed(sd: float, design: SequentialDesign, effect: float, power: float = 0.8,
                  prior_df: int = 0) -> int | None:
    """Rounds a design needs to call a true relative `effect` with the given power, at a paired
    per-round sd of the log-ratio (for `validate --plan`). None: not within 10,000 rounds (an effect
    on the band edge is never called either way)."""
    if not 0 < power < 1:
        raise ValueError(f"power={power!r}: must lie in (0, 1); fix: use e.g. 0.8")
    if not sd > 0:
        raise ValueError(f"sd={sd!r}: must be > 0; fix: pass the stored or default paired sd")
    start = max(1, design.min_rounds)
    lo, hi = start, start
    while final_look_power(sd, prior_df, design, effect, hi) < power:
        lo, hi = hi + 1, hi * 2
        if hi > _PLAN_CAP:
            return None
    while lo < hi:  # power rises with rounds: bisect to the smallest
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if final_look_power(sd, prior_df, design, effect, mid) < power else (lo, mid)
    return lo


def _more_rounds(lead: UnitResult, design: SequentialDesign) -> int | None:
    """Rounds beyond those done after which the composite would likely (50%) be called, taking its
    estimate and variance at face value. Cells held back by the veto may need more."""
    if lead.interval is None or lead.variance is None:
        return None
    prior_df = lead.variance.df - (lead.rounds - 1) if lead.variance.prior_used else 0
    need = rounds_needed(lead.variance.sd, design, lead.interval.estimate, 0.5, prior_df)
    return None if need is None else max(1, need - lead.rounds)
