"""Statistics for restart-block A/B experiments (issue 4): pure functions, numpy/scipy only.

The unit of replication is a restart block, not a request (DOMAIN rule 7: identical boots of the
same config swing 45-65 tok/s in one cell). So every comparison here works on one value per
block (the block median of a cell), paired across arms by launch order.

Contents
- block_order / pair_blocks: counterbalanced launch sequence and the block pairs it implies.
- relative_diff_ci / log_ratio_interval: candidate-vs-baseline relative difference with a CI that
  stays honest at 3-6 pairs (BCa bootstrap, never narrower than the paired t-interval).
- classify / CellVerdict / VerdictRule / experiment_verdict: gain/regression/flat/inconclusive per
  cell and the PROMOTE / REVERT / INCONCLUSIVE rule.
- decay / tail_collapsed: per-position acceptance curve summaries.
- fit_step_time / step_time_from / predict_k / prediction_error: cost model for neighbouring k.
- adaptive_decision / simulate_paths / simulate: optional adaptive stopping and its vectorised
  simulation.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

Outcome = Literal["gain", "regression", "flat", "inconclusive"]
Decision = Literal["PROMOTE", "REVERT", "INCONCLUSIVE"]
OUTCOMES: tuple[Outcome, ...] = ("gain", "regression", "flat", "inconclusive")

# ------------------------------------------------------------------------------------ block order


def _thue_morse(i: int) -> int:
    return bin(i).count("1") & 1


def _williams_rows(m: int) -> list[list[int]]:
    # Standard Williams construction: first row 0, 1, m-1, 2, m-2, ...; row r adds r (mod m).
    first = [0]
    lo, hi = 1, m - 1
    while len(first) < m:
        first.append(lo)
        lo += 1
        if len(first) < m:
            first.append(hi)
            hi -= 1
    return [[(x + r) % m for x in first] for r in range(m)]


def _mirror_pairs(m: int) -> list[tuple[list[int], list[int]]]:
    """The Williams design as (row, reversed row) pairs.

    Even m: the reverse of row r is row r + m/2, so the m-row square is m/2 such pairs.
    Odd m: Williams needs the square plus its mirror image (2m rows), i.e. m pairs.
    A row followed by its mirror gives every arm the same summed position, which is what
    cancels linear drift every two rounds.
    """
    rows = _williams_rows(m)
    if m % 2 == 0:
        return [(rows[r], rows[r][::-1]) for r in range(m // 2)]
    return [(row, row[::-1]) for row in rows]


def block_order(arms: Sequence[str], blocks_per_arm: int) -> list[tuple[str, int]]:
    """Launch sequence of (arm, block number for that arm, from 1), counterbalanced against drift.

    Launches come in rounds; each round launches every arm once, so block i of every arm is in
    round i. Rounds come in mirror pairs (a row of a Williams design, then that row reversed),
    and which member of the pair goes first follows the Thue-Morse sequence over pair index.

    Guarantees (tested):
    1. Round i holds block i of every arm (paired blocks are at most len(arms)-1 launches apart;
       adjacent for two arms).
    2. After every even number of rounds, every arm has the same mean launch position, so a
       linear drift (thermal, page cache, a neighbour's job ramping up) cancels exactly; with an
       odd number of rounds the imbalance is at most one round.
    3. Over each full Williams cycle (m rounds for an even number of arms m, 2m for odd m) every
       arm takes each within-round position equally often, and within rounds every arm directly
       precedes every other arm equally often (carry-over balance). Transitions across round
       boundaries are not balanced.
    4. Two arms: the sequence is the Thue-Morse sequence A B B A B A A B ..., so the first 2^(d+1)
       launches also cancel polynomial drift up to degree d (Prouhet-Tarry-Escott).
    5. block_order(arms, n) is a prefix of block_order(arms, n + 1), so adaptive stopping can
       extend a run one round at a time and keep every guarantee above.
    """
    if not arms:
        raise ValueError("block_order needs at least one arm")
    if len(set(arms)) != len(arms):
        raise ValueError(f"arm names must be unique: {list(arms)}")
    if blocks_per_arm < 0:
        raise ValueError("blocks_per_arm must be >= 0")
    pairs = _mirror_pairs(len(arms))
    rounds: list[list[int]] = []
    k = 0
    while len(rounds) < blocks_per_arm:
        fwd, rev = pairs[k % len(pairs)]
        rounds += [fwd, rev] if _thue_morse(k) == 0 else [rev, fwd]
        k += 1
    return [(arms[a], r + 1) for r, row in enumerate(rounds[:blocks_per_arm]) for a in row]


def pair_blocks(order: Sequence[tuple[str, int]], baseline: str, candidate: str) -> list[tuple[int, int]]:
    """(baseline block, candidate block) pairs: the i-th launch of one with the i-th of the other.

    In a block_order sequence those two launches sit in the same round (adjacent for two arms),
    so the pair shares whatever slow drift the host had at the time; the paired difference
    removes it. A trailing launch without a partner is left out.
    """
    if baseline == candidate:
        raise ValueError("baseline and candidate must be different arms")
    base = [blk for arm, blk in order if arm == baseline]
    cand = [blk for arm, blk in order if arm == candidate]
    return list(zip(base, cand))


# ------------------------------------------------------------------------------ confidence interval

METHOD_HULL = "bca+t-floor"  # BCa bootstrap, widened to the paired t-interval where that is wider
METHOD_T = "t"  # too few pairs (or no spread) for a bootstrap: paired t-interval alone
METHOD_NONE = "none"  # a single pair: no spread estimate at all, interval is infinite

# Below 3 pairs a bootstrap has at most 3 distinct resample means; it adds nothing.
BOOTSTRAP_MIN_PAIRS = 3
# Cap on floats per vectorised bootstrap batch (experiments x pairs x resamples), ~160 MB.
_BOOT_ELEMENTS = 20_000_000


@dataclass(frozen=True)
class DiffCI:
    """Relative difference candidate vs baseline, e.g. estimate 0.08 means 8 % higher.

    Built on log(c_i / b_i) per block pair and reported as exp(x) - 1, so low >= -1 always and
    an infinite interval is (-1, inf).
    """

    estimate: float
    low: float
    high: float
    n_pairs: int
    method: str
    confidence: float = 0.95

    @property
    def width(self) -> float:
        return self.high - self.low


def log_ratio_interval(
    log_ratios: ArrayLike,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    rng: np.random.Generator | int | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], str]:
    """Mean and CI of paired log-ratios along the last axis, vectorised over leading axes.

    Why this interval: a percentile bootstrap over 3 pairs never leaves [min, max] of the three
    ratios; simulated with 10 % block noise per arm it covers the truth in 75 % of experiments at
    3 pairs and 85 % at 6, not 95 %. BCa alone is no better below ~12 pairs (the bootstrap
    spread uses divisor n and a normal quantile). The paired t-interval is exact for normally
    distributed log-ratios at any n >= 2 and honestly wide (t_{0.975,2} = 4.3). So the interval
    is the union of the two: the t-interval is the floor that keeps small-n intervals honest (it is
    the binding side in most experiments below ~12 pairs), and BCa can only widen it, which it does
    for larger, skewed samples (an occasional bad boot). Coverage is therefore at least the
    t-interval's: 94-95 % for normal noise and 96-97 % with 15 % "bad boots" mixed in at 3-12
    pairs (tests/test_stats.py checks >= 93 % at 3, 4 and 6 pairs).

    n_resamples=0 skips the bootstrap (t-interval only), for fast simulations.
    Returns (mean, low, high, method) on the log scale.
    """
    d = np.asarray(log_ratios, dtype=float)
    if d.ndim == 0 or d.shape[-1] < 2:
        raise ValueError("need at least two pairs along the last axis")
    if not 0 < confidence < 1:
        raise ValueError("confidence must be in (0, 1)")
    n = d.shape[-1]
    mean = d.mean(axis=-1)
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * d.std(axis=-1, ddof=1) / math.sqrt(n)
    low, high = mean - half, mean + half
    if n_resamples <= 0 or n < BOOTSTRAP_MIN_PAIRS:
        return mean, low, high, METHOD_T
    rows = d.reshape(-1, n)
    batch = max(1, min(n_resamples, _BOOT_ELEMENTS // (rows.shape[0] * n)))
    with warnings.catch_warnings():
        # Rows whose pairs are all identical make BCa degenerate (NaN + warning); fmin/fmax below
        # then fall back to the t-interval, which is a point there.
        warnings.simplefilter("ignore")
        res = stats.bootstrap(
            (rows,),
            np.mean,
            n_resamples=n_resamples,
            batch=batch,
            vectorized=True,
            axis=-1,
            confidence_level=confidence,
            method="BCa",
            rng=rng,
        )
    boot_low = np.asarray(res.confidence_interval.low, dtype=float).reshape(mean.shape)
    boot_high = np.asarray(res.confidence_interval.high, dtype=float).reshape(mean.shape)
    return mean, np.fmin(low, boot_low), np.fmax(high, boot_high), METHOD_HULL


def relative_diff_ci(
    baseline: Sequence[float],
    candidate: Sequence[float],
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> DiffCI | None:
    """CI of the relative difference candidate vs baseline over paired block medians.

    baseline[i] and candidate[i] are the two blocks of pair i (see pair_blocks). A NaN on either
    side (a rejected or incomplete block) drops that pair: a rejected cell is missing, not zero
    (DOMAIN rule 10). Returns None with no usable pair; with one pair the interval is (-1, inf),
    which classify() always calls inconclusive.
    """
    b = np.asarray(baseline, dtype=float)
    c = np.asarray(candidate, dtype=float)
    if b.shape != c.shape or b.ndim != 1:
        raise ValueError(f"baseline and candidate must be 1-D and paired: {b.shape} vs {c.shape}")
    keep = ~(np.isnan(b) | np.isnan(c))
    b, c = b[keep], c[keep]
    if np.any(b <= 0) or np.any(c <= 0) or not (np.all(np.isfinite(b)) and np.all(np.isfinite(c))):
        raise ValueError("block values must be positive and finite (a zero is a failed cell: drop it)")
    n = int(b.size)
    if n == 0:
        return None
    d = np.log(c / b)
    if n == 1:
        return DiffCI(float(np.expm1(d[0])), -1.0, math.inf, 1, METHOD_NONE, confidence)
    mean, low, high, method = log_ratio_interval(d, confidence, n_resamples, np.random.default_rng(seed))
    return DiffCI(float(np.expm1(mean)), float(np.expm1(low)), float(np.expm1(high)), n, method, confidence)


# --------------------------------------------------------------------------------------- verdicts


def classify(ci: DiffCI | None, band: float) -> Outcome:
    """gain: CI above +band; regression: CI below -band; flat: CI inside [-band, +band];
    inconclusive: the CI straddles a band edge (or there is no CI). band is relative (0.05 = 5 %)."""
    if band < 0:
        raise ValueError("band must be >= 0")
    if ci is None:
        return "inconclusive"
    if ci.low > band:
        return "gain"
    if ci.high < -band:
        return "regression"
    if -band <= ci.low and ci.high <= band:
        return "flat"
    return "inconclusive"


@dataclass(frozen=True)
class CellVerdict:
    """One compared cell: candidate `arm` vs the baseline at (concurrency, prompt_class, metric)."""

    arm: str
    concurrency: int
    prompt_class: str
    metric: str
    ci: DiffCI | None
    outcome: Outcome

    @classmethod
    def from_ci(
        cls, arm: str, concurrency: int, prompt_class: str, metric: str, ci: DiffCI | None, band: float
    ) -> CellVerdict:
        return cls(arm, concurrency, prompt_class, metric, ci, classify(ci, band))

    @property
    def label(self) -> str:
        return f"{self.arm} c={self.concurrency} {self.prompt_class} {self.metric}"


@dataclass(frozen=True)
class VerdictRule:
    """The experiment rule. Defaults follow the seed proposal: promote only on a real gain with a
    healthy acceptance tail. `band` is the noise band cells are classified with (DOMAIN: +-5 % is
    flat in practice; a team that keeps changes only at >= +8 % sets band=0.08)."""

    band: float = 0.05
    tail_floor: float = 0.2
    require_gain: bool = True
    metric: str = "decode_tok_s"

    def tail_collapsed(self, per_position: Sequence[float]) -> bool:
        return tail_collapsed(per_position, self.tail_floor)


@dataclass
class Verdict:
    decision: Decision
    reasons: list[str]
    needs_more_blocks: list[CellVerdict] = field(default_factory=list)


def experiment_verdict(
    cells: Sequence[CellVerdict],
    tail_collapsed_arms: Sequence[str],
    correctness_failures: Sequence[str],
    declared_concurrency: Sequence[int],
    rule: VerdictRule = VerdictRule(),
) -> Verdict:
    """PROMOTE / REVERT / INCONCLUSIVE from classified cells.

    Only cells of rule.metric at the declared concurrencies count (all concurrencies present if
    none are declared). REVERT: any correctness failure (greedy output changed: a faster build
    that changes outputs is a bug, not a win), any tail collapse, any regressing cell.
    PROMOTE: every counted cell gain or flat, at least one gain (if rule.require_gain), every
    declared concurrency measured. Otherwise INCONCLUSIVE, with the straddling cells listed.
    """
    declared = set(declared_concurrency) or {c.concurrency for c in cells if c.metric == rule.metric}
    counted = [c for c in cells if c.metric == rule.metric and c.concurrency in declared]
    gains = [c for c in counted if c.outcome == "gain"]
    regressions = [c for c in counted if c.outcome == "regression"]
    unsure = [c for c in counted if c.outcome == "inconclusive"]
    missing = sorted(declared - {c.concurrency for c in counted})

    reasons: list[str] = []
    for failure in correctness_failures:
        speed = f" (despite {len(gains)} faster cell(s))" if gains else ""
        reasons.append(f"correctness: greedy output changed: {failure}{speed}")
    for arm in tail_collapsed_arms:
        reasons.append(f"tail collapse: {arm} last-position acceptance below {rule.tail_floor:g}")
    for c in regressions:
        reasons.append(f"regression: {c.label} {_fmt_ci(c.ci)} below -{rule.band:.0%}")
    if reasons:
        return Verdict("REVERT", reasons)

    if not counted:
        return Verdict("INCONCLUSIVE", [f"no {rule.metric} cells at the declared concurrencies"])
    for conc in missing:
        reasons.append(f"missing: no {rule.metric} result at c={conc} (rejected or not run)")
    for c in unsure:
        reasons.append(f"inconclusive: {c.label} {_fmt_ci(c.ci)} straddles +-{rule.band:.0%}")
    if reasons:
        return Verdict("INCONCLUSIVE", reasons, unsure)
    if rule.require_gain and not gains:
        return Verdict("INCONCLUSIVE", [f"every cell is flat within +-{rule.band:.0%}; the rule requires a gain"])
    reasons = [f"gain: {c.label} {_fmt_ci(c.ci)}" for c in gains]
    reasons += [f"flat: {c.label} {_fmt_ci(c.ci)}" for c in counted if c.outcome == "flat"]
    return Verdict("PROMOTE", reasons)


def _fmt_ci(ci: DiffCI | None) -> str:
    if ci is None:
        return "(no pairs)"
    return f"{ci.estimate:+.1%} [{ci.low:+.1%}, {ci.high:+.1%}] n={ci.n_pairs}"


# ------------------------------------------------------------------------------ acceptance curves


def decay(per_position: Sequence[float]) -> float | None:
    """Last-position acceptance over first-position acceptance (1.0 = no decay)."""
    if len(per_position) == 0 or per_position[0] <= 0:
        return None
    return float(per_position[-1]) / float(per_position[0])


def tail_collapsed(per_position: Sequence[float], floor: float = 0.2) -> bool:
    """True when the deepest position is accepted less often than `floor`: that slot costs
    verify compute and graph memory but rarely yields a token."""
    return len(per_position) > 0 and float(per_position[-1]) < floor


# -------------------------------------------------------------------------------------- cost model


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


# ------------------------------------------------------------------------------ adaptive stopping


@dataclass(frozen=True)
class StopDecision:
    add_block: bool
    reason: str
    pending: list[Hashable]  # cells whose CI still straddles a band edge


def adaptive_decision(
    cis: Mapping[Hashable, DiffCI | None],
    band: float,
    blocks_done: int,
    min_blocks: int = 3,
    max_blocks: int = 10,
) -> StopDecision:
    """Whether to launch another block per arm.

    Below min_blocks: always (>= 3 blocks per arm is the floor, DOMAIN rule 7). Then stop as soon
    as every compared cell is classified (gain, regression or flat) or max_blocks is reached.
    Stopping on a clear result is a repeated look at the data: with 95 % CIs at every look the
    wrong-call rate grows several-fold over a fixed design (benchmarks/adaptive_stopping.py
    measures it). To keep the fixed design's error rate, compute the CIs fed to this function at
    a higher per-look confidence (the benchmark calibrates it, e.g. 99 % for looks 3..10).
    """
    if not 1 <= min_blocks <= max_blocks:
        raise ValueError("need 1 <= min_blocks <= max_blocks")
    pending = [key for key, ci in cis.items() if classify(ci, band) == "inconclusive"]
    if blocks_done >= max_blocks:
        why = f"maximum of {max_blocks} blocks reached"
        return StopDecision(False, why + (f"; {len(pending)} cell(s) still inconclusive" if pending else ""), pending)
    if blocks_done < min_blocks:
        return StopDecision(True, f"{blocks_done} of the minimum {min_blocks} blocks done", pending)
    if not pending:
        return StopDecision(False, f"every cell cleared the +-{band:.0%} band after {blocks_done} blocks", pending)
    return StopDecision(True, f"{len(pending)} cell(s) straddle the +-{band:.0%} band", pending)


_CODE = {name: i for i, name in enumerate(OUTCOMES)}


def _classify_codes(low: NDArray[np.float64], high: NDArray[np.float64], band: float) -> NDArray[np.int8]:
    # Vectorised classify() on the relative scale; codes index OUTCOMES.
    out = np.full(low.shape, _CODE["inconclusive"], dtype=np.int8)
    out[(low >= -band) & (high <= band)] = _CODE["flat"]
    out[high < -band] = _CODE["regression"]
    out[low > band] = _CODE["gain"]
    return out


def wrong_call(outcome: Outcome, true_effect: float, band: float) -> bool:
    """A call the truth contradicts: gain/regression when the truth is inside the band or of the
    other sign, or flat when the truth lies outside the band. Inconclusive is never wrong."""
    if outcome == "gain":
        return true_effect <= band
    if outcome == "regression":
        return true_effect >= -band
    if outcome == "flat":
        return abs(true_effect) > band
    return False


def simulate_paths(
    n_experiments: int,
    true_effect: float,
    block_sd: float,
    band: float,
    max_blocks: int,
    rng: np.random.Generator,
    min_blocks: int = 2,
    base: float = 55.0,
    confidence: float = 0.95,
    n_resamples: int = 2000,
) -> NDArray[np.int8]:
    """Outcome code (index into OUTCOMES) of each simulated experiment after n = 1..max_blocks
    blocks per arm: array (n_experiments, max_blocks); columns below min_blocks are inconclusive.

    Block medians: baseline base*(1 + block_sd*z), candidate base*(1+true_effect)*(1 + block_sd*z'),
    z independent standard normal per block and arm (boot-to-boot noise; DOMAIN: 45-65 tok/s in
    one cell is about 55 +- 5.5, block_sd 0.10). Additive normal noise, so the log-ratios are not
    exactly normal: a mild robustness check of the t floor. Draws are blocks-major, so the first n
    blocks are identical for any max_blocks with the same seed (fixed and adaptive designs see the
    same experiments). The CI is log_ratio_interval vectorised over experiments: the same method
    as relative_diff_ci, with n_resamples BCa resamples (0 = its t floor alone, much faster).
    """
    if n_experiments < 1 or max_blocks < 1:
        raise ValueError("need n_experiments >= 1 and max_blocks >= 1")
    z = rng.standard_normal((max_blocks, 2, n_experiments))
    floor = 1e-6 * base  # keeps absurd block_sd values from producing non-positive throughput
    b = np.maximum(base * (1 + block_sd * z[:, 0, :]), floor)
    c = np.maximum(base * (1 + true_effect) * (1 + block_sd * z[:, 1, :]), floor)
    d = np.log(c / b).T  # (experiments, blocks)
    codes = np.full((n_experiments, max_blocks), _CODE["inconclusive"], dtype=np.int8)
    for n in range(max(2, min_blocks), max_blocks + 1):
        _, low, high, _ = log_ratio_interval(d[:, :n], confidence, n_resamples, rng)
        codes[:, n - 1] = _classify_codes(np.expm1(low), np.expm1(high), band)
    return codes


@dataclass(frozen=True)
class SimResult:
    mean_blocks: float
    decision_rates: dict[str, float]  # share of experiments ending in each outcome
    wrong_rate: float  # share of wrong calls (see wrong_call)
    n_experiments: int


def stopping_outcomes(
    codes: NDArray[np.int8], min_blocks: int, max_blocks: int, adaptive: bool
) -> tuple[NDArray[np.int8], NDArray[np.int64]]:
    """Final outcome code and blocks used per experiment from simulate_paths output.

    Fixed design: the outcome after max_blocks. Adaptive: the first n >= min_blocks whose outcome
    is not inconclusive, else the outcome at max_blocks.
    """
    if not adaptive:
        return codes[:, max_blocks - 1], np.full(codes.shape[0], max_blocks, dtype=np.int64)
    window = codes[:, min_blocks - 1 : max_blocks] != _CODE["inconclusive"]
    decided = window.any(axis=1)
    blocks = np.where(decided, window.argmax(axis=1) + min_blocks, max_blocks).astype(np.int64)
    return codes[np.arange(codes.shape[0]), blocks - 1], blocks


def summarize(final: NDArray[np.int8], blocks: NDArray[np.int64], true_effect: float, band: float) -> SimResult:
    rates = {name: float(np.mean(final == i)) for i, name in enumerate(OUTCOMES)}
    wrong = sum(rate for name, rate in rates.items() if wrong_call(name, true_effect, band))  # type: ignore[arg-type]
    return SimResult(float(blocks.mean()), rates, float(wrong), int(final.size))


def simulate(
    n_experiments: int,
    true_effect: float,
    block_sd: float,
    band: float,
    min_blocks: int,
    max_blocks: int,
    adaptive: bool,
    rng: np.random.Generator,
    n_resamples: int = 2000,
    confidence: float = 0.95,
) -> SimResult:
    """Simulate a fixed design (max_blocks blocks per arm) or adaptive stopping (min_blocks, then
    one block at a time up to max_blocks) over n_experiments experiments. See simulate_paths."""
    if not 2 <= min_blocks <= max_blocks:
        raise ValueError("need 2 <= min_blocks <= max_blocks")
    first = min_blocks if adaptive else max_blocks
    codes = simulate_paths(
        n_experiments, true_effect, block_sd, band, max_blocks, rng, first,
        confidence=confidence, n_resamples=n_resamples,
    )
    final, blocks = stopping_outcomes(codes, min_blocks, max_blocks, adaptive)
    return summarize(final, blocks, true_effect, band)
