"""Adaptive stopping vs a fixed round design, by simulation (issue 4).

For each true effect, simulate many A/B experiments whose round medians carry realistic
boot-to-boot noise (DOMAIN: identical boots swing 45-65 tok/s in one cell, about 55 +- 5.5,
i.e. round sd ~10 % per arm) and compare:

- fixed design: F rounds per arm (default 6), verdict from the CI after the last round;
- adaptive: min M rounds (default 3), then one more round per arm until the CI clears the noise
  band (gain / regression / flat) or the maximum X (default 10) is reached.

Every design sees the same simulated experiments (rounds-major draws) and uses the interval of
specwatch.analysis.intervals.relative_diff_ci (BCa bootstrap floored by the paired t-interval), vectorised over
experiments. Printed per effect: mean rounds per arm, outcome rates, and the wrong-call rate
(gain or regression when the truth is inside the band or of the other sign; flat when the truth
is outside it). Stopping at the first clear CI is a repeated look, which inflates wrong calls, so
adaptive is shown twice: with 95 % CIs at every look, and with the lowest per-look confidence
(from a small grid) whose worst wrong-call rate over all effects is no higher than the fixed
design's. Last, "rounds saved at the same error rate": for the calibrated adaptive design, the
smallest fixed design that calls the effect right at least as often within the same wrong-call
budget, and the difference in rounds per arm.

    .venv/bin/python benchmarks/adaptive_stopping.py [--experiments 4000] [--round-sd 0.10]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.simulation import SimResult, simulate_paths, stopping_outcomes, summarize  # noqa: E402
from specwatch.analysis.decision import OUTCOMES  # noqa: E402

DEFAULT_EFFECTS = "0,0.03,-0.03,0.08,-0.08,0.15,-0.15"
# Per-look confidence levels tried to bring adaptive's wrong-call rate down to the fixed design's.
LOOK_LEVELS = (0.95, 0.98, 0.99, 0.995, 0.998, 0.999)


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiments", type=int, default=4000, help="simulated experiments per true effect")
    ap.add_argument("--round-sd", type=float, default=0.10, help="relative sd of one round median per arm")
    ap.add_argument("--band", type=float, default=0.05, help="noise band (flat = CI inside +-band)")
    ap.add_argument("--fixed", type=int, default=6, help="rounds per arm of the fixed design")
    ap.add_argument("--min-rounds", type=int, default=3)
    ap.add_argument("--max-rounds", type=int, default=10)
    ap.add_argument("--extend", type=int, default=20, help="largest fixed design searched for the equivalence")
    ap.add_argument("--resamples", type=int, default=1000, help="BCa resamples per CI (0 = t floor only)")
    ap.add_argument("--effects", default=DEFAULT_EFFECTS, help="comma-separated true relative effects")
    ap.add_argument("--seed", type=int, default=20260904)
    return ap.parse_args()


def row(label: str, r: SimResult) -> str:
    rates = "  ".join(f"{r.decision_rates[o]:6.1%}" for o in OUTCOMES)
    return f"  {label:<22} {r.mean_rounds:6.2f}  {rates}  {r.wrong_rate:7.2%}"


def correct(r: SimResult) -> float:
    # decided and not contradicted by the truth
    return 1 - r.decision_rates["inconclusive"] - r.wrong_rate


def ok(fixed: SimResult, adaptive: SimResult, budget: float) -> bool:
    return fixed.wrong_rate <= budget and correct(fixed) >= correct(adaptive)


def main() -> None:
    a = parse()
    effects = [float(x) for x in a.effects.split(",")]
    lo = min(a.min_rounds, a.fixed)
    top = max(a.extend, a.max_rounds, a.fixed)
    t0 = time.perf_counter()

    def paths(i: int, effect: float, n_max: int, first: int, confidence: float) -> np.ndarray:
        # Same seed per effect: rounds-major draws make every design see the same experiments.
        rng = np.random.default_rng([a.seed, i])
        return simulate_paths(
            a.experiments, effect, a.round_sd, a.band, n_max, rng, first, confidence=confidence, n_resamples=a.resamples
        )

    def design(codes: np.ndarray, effect: float, n_min: int, n_max: int, adaptive: bool) -> SimResult:
        final, rounds = stopping_outcomes(codes, n_min, n_max, adaptive)
        return summarize(final, rounds, effect, a.band)

    fixed_paths = [paths(i, e, top, lo, 0.95) for i, e in enumerate(effects)]
    fixed = [design(c, e, a.fixed, a.fixed, False) for c, e in zip(fixed_paths, effects, strict=True)]
    fixed_max = [design(c, e, a.max_rounds, a.max_rounds, False) for c, e in zip(fixed_paths, effects, strict=True)]
    target = max(r.wrong_rate for r in fixed)

    # Adaptive at 95 % per look, then the lowest per-look level whose worst wrong-call rate over
    # all effects is no higher than the fixed design's worst.
    adaptive: dict[float, list[SimResult]] = {}
    calibrated = LOOK_LEVELS[-1]
    for level in LOOK_LEVELS:
        codes = [
            c if level == 0.95 else paths(i, e, a.max_rounds, a.min_rounds, level)
            for i, (c, e) in enumerate(zip(fixed_paths, effects, strict=True))
        ]
        adaptive[level] = [design(c, e, a.min_rounds, a.max_rounds, True) for c, e in zip(codes, effects, strict=True)]
        if max(r.wrong_rate for r in adaptive[level]) <= target:
            calibrated = level
            break

    print(
        f"round sd {a.round_sd:.0%} per arm (55 +- {55 * a.round_sd:.1f} tok/s), band +-{a.band:.0%}, "
        f"CI = BCa ({a.resamples} resamples) floored by paired t, {a.experiments} experiments per effect"
    )
    print(f"  {'design':<22} {'rounds':>6}  " + "  ".join(f"{o[:6]:>6}" for o in OUTCOMES) + "    wrong")
    for i, effect in enumerate(effects):
        print(f"true effect {effect:+.0%}")
        print(row(f"fixed {a.fixed} @95%", fixed[i]))
        print(row(f"fixed {a.max_rounds} @95%", fixed_max[i]))
        print(row(f"adaptive {a.min_rounds}-{a.max_rounds} @95%/look", adaptive[0.95][i]))
        if calibrated != 0.95:
            print(row(f"adaptive {a.min_rounds}-{a.max_rounds} @{calibrated:.1%}/look", adaptive[calibrated][i]))

    worst95 = max(r.wrong_rate for r in adaptive[0.95])
    worst = max(r.wrong_rate for r in adaptive[calibrated])
    print(
        f"\nworst wrong-call rate over effects: fixed {a.fixed} {target:.2%}, adaptive @95%/look {worst95:.2%}, "
        f"adaptive @{calibrated:.1%}/look {worst:.2%} (the calibrated level)"
    )
    print(
        f"\nrounds saved at the same error rate: smallest fixed design (95% CI) whose wrong-call rate stays"
        f"\nwithin the common budget ({target:.2%}) and whose correct-call rate is at least the calibrated"
        f"\nadaptive design's, same experiments (negative = adaptive costs rounds):"
    )
    for i, effect in enumerate(effects):
        ad = adaptive[calibrated][i]
        match = next(
            (n for n in range(lo, top + 1) if ok(design(fixed_paths[i], effect, n, n, False), ad, target)), None
        )
        head = (
            f"  {effect:+4.0%}: adaptive {ad.mean_rounds:5.2f} rounds, correct {correct(ad):6.1%}, "
            f"wrong {ad.wrong_rate:5.2%}"
        )
        if match is None:
            print(f"{head} | no fixed design up to {top} rounds calls it right as often")
            continue
        m = design(fixed_paths[i], effect, match, match, False)
        print(
            f"{head} | fixed {match:2d}: correct {correct(m):6.1%}, wrong {m.wrong_rate:5.2%} "
            f"| saves {match - ad.mean_rounds:+5.2f} rounds per arm"
        )
    print(f"\nwall time {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
