"""Vectorised simulation of fixed and adaptive round designs (benchmarks/adaptive_stopping.py,
and the coverage tests). Not part of the engine: nothing in a run calls it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from specwatch.analysis.decision import OUTCOMES, Outcome
from specwatch.analysis.intervals import log_ratio_interval

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
    round_sd: float,
    band: float,
    max_rounds: int,
    rng: np.random.Generator,
    min_rounds: int = 2,
    base: float = 55.0,
    confidence: float = 0.95,
    n_resamples: int = 2000,
) -> NDArray[np.int8]:
    """Outcome code (index into OUTCOMES) of each simulated experiment after n = 1..max_rounds
    rounds per arm: array (n_experiments, max_rounds); columns below min_rounds are inconclusive.

    Round medians: baseline base*(1 + round_sd*z), candidate base*(1+true_effect)*(1 + round_sd*z'),
    z independent standard normal per round and arm (boot-to-boot noise; DOMAIN: 45-65 tok/s in
    one cell is about 55 +- 5.5, round_sd 0.10). Additive normal noise, so the log-ratios are not
    exactly normal: a mild robustness check of the t floor. Draws are rounds-major, so the first n
    rounds are identical for any max_rounds with the same seed (fixed and adaptive designs see the
    same experiments). The CI is log_ratio_interval vectorised over experiments: the same method
    as relative_diff_ci, with n_resamples BCa resamples (0 = its t floor alone, much faster).
    """
    if n_experiments < 1 or max_rounds < 1:
        raise ValueError("need n_experiments >= 1 and max_rounds >= 1")
    z = rng.standard_normal((max_rounds, 2, n_experiments))
    floor = 1e-6 * base  # keeps absurd round_sd values from producing non-positive throughput
    b = np.maximum(base * (1 + round_sd * z[:, 0, :]), floor)
    c = np.maximum(base * (1 + true_effect) * (1 + round_sd * z[:, 1, :]), floor)
    d = np.log(c / b).T  # (experiments, rounds)
    codes = np.full((n_experiments, max_rounds), _CODE["inconclusive"], dtype=np.int8)
    for n in range(max(2, min_rounds), max_rounds + 1):
        _, low, high, _ = log_ratio_interval(d[:, :n], confidence, n_resamples, rng)
        codes[:, n - 1] = _classify_codes(np.expm1(low), np.expm1(high), band)
    return codes


@dataclass(frozen=True)
class SimResult:
    mean_rounds: float
    decision_rates: dict[str, float]  # share of experiments ending in each outcome
    wrong_rate: float  # share of wrong calls (see wrong_call)
    n_experiments: int


def stopping_outcomes(
    codes: NDArray[np.int8], min_rounds: int, max_rounds: int, adaptive: bool
) -> tuple[NDArray[np.int8], NDArray[np.int64]]:
    """Final outcome code and rounds used per experiment from simulate_paths output.

    Fixed design: the outcome after max_rounds. Adaptive: the first n >= min_rounds whose outcome
    is not inconclusive, else the outcome at max_rounds.
    """
    if not adaptive:
        return codes[:, max_rounds - 1], np.full(codes.shape[0], max_rounds, dtype=np.int64)
    window = codes[:, min_rounds - 1 : max_rounds] != _CODE["inconclusive"]
    decided = window.any(axis=1)
    rounds = np.where(decided, window.argmax(axis=1) + min_rounds, max_rounds).astype(np.int64)
    return codes[np.arange(codes.shape[0]), rounds - 1], rounds


def summarize(final: NDArray[np.int8], rounds: NDArray[np.int64], true_effect: float, band: float) -> SimResult:
    rates = {name: float(np.mean(final == i)) for i, name in enumerate(OUTCOMES)}
    wrong = sum(rate for name, rate in rates.items() if wrong_call(name, true_effect, band))  # type: ignore[arg-type]
    return SimResult(float(rounds.mean()), rates, float(wrong), int(final.size))


def simulate(n_experiments: int, true_effect: float, round_sd: float, band: float, rounds: tuple[int, int],
             adaptive: bool, rng: np.random.Generator, **paths: Any) -> SimResult:
    """Simulate a fixed design (max_rounds rounds per arm) or adaptive stopping (min_rounds, then
    one round at a time up to max_rounds) over n_experiments experiments; `rounds` is
    (min_rounds, max_rounds), `paths` more options of simulate_paths (confidence, n_resamples)."""
    min_rounds, max_rounds = rounds
    if not 2 <= min_rounds <= max_rounds:
        raise ValueError("need 2 <= min_rounds <= max_rounds")
    first = min_rounds if adaptive else max_rounds
    codes = simulate_paths(n_experiments, true_effect, round_sd, band, max_rounds, rng, first, **paths)
    final, rounds = stopping_outcomes(codes, min_rounds, max_rounds, adaptive)
    return summarize(final, rounds, true_effect, band)
