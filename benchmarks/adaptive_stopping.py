"""Adaptive stopping vs a fixed block design, by simulation (issue 4).

For each true effect, simulate many A/B experiments whose block medians carry realistic
boot-to-boot noise (DOMAIN: identical boots swing 45-65 tok/s in one cell, about 55 +- 5.5,
i.e. block sd ~10 % per arm) and compare:

- fixed design: F blocks per arm (default 6), verdict from the CI after the last block;
- adaptive: min M blocks (default 3), then one more block per arm until the CI clears the noise
  band (gain / regression / flat) or the maximum X (default 10) is reached.

Both designs see the same simulated experiments (blocks-major draws), and use the same interval
as specwatch.stats.relative_diff_ci (BCa bootstrap floored by the paired t-interval), vectorised
over experiments. Printed per effect: mean blocks per arm, outcome rates, wrong-call rate (gain or
regression when the truth is inside the band or of the other sign; flat when the truth is outside
the band), and the smallest fixed design that is at least as decisive as adaptive, i.e. how many
blocks adaptive saves for the same decisiveness, with both wrong-call rates side by side.

    PYTHONPATH=. /tmp/pv/bin/python benchmarks/adaptive_stopping.py [--experiments 4000] [--block-sd 0.10]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specwatch.stats import OUTCOMES, SimResult, simulate_paths, stopping_outcomes, summarize  # noqa: E402

EFFECTS = (0.0, 0.03, -0.03, 0.08, -0.08, 0.15, -0.15)


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiments", type=int, default=4000, help="simulated experiments per true effect")
    ap.add_argument("--block-sd", type=float, default=0.10, help="relative sd of one block median per arm")
    ap.add_argument("--band", type=float, default=0.05, help="noise band (flat = CI inside +-band)")
    ap.add_argument("--fixed", type=int, default=6, help="blocks per arm of the fixed design")
    ap.add_argument("--min-blocks", type=int, default=3)
    ap.add_argument("--max-blocks", type=int, default=10)
    ap.add_argument("--extend", type=int, default=20, help="largest fixed design searched for the equivalence")
    ap.add_argument("--resamples", type=int, default=1000, help="BCa resamples per CI (0 = t floor only)")
    ap.add_argument("--seed", type=int, default=20260904)
    return ap.parse_args()


def row(label: str, r: SimResult) -> str:
    rates = "  ".join(f"{r.decision_rates[o]:6.1%}" for o in OUTCOMES)
    return f"  {label:<16} {r.mean_blocks:6.2f}  {rates}  {r.wrong_rate:7.2%}"


def main() -> None:
    args = parse()
    lo = min(args.min_blocks, args.fixed)
    top = max(args.extend, args.max_blocks, args.fixed)
    print(
        f"block sd {args.block_sd:.0%} per arm (55 +- {55 * args.block_sd:.1f} tok/s), band +-{args.band:.0%}, "
        f"95% CI = BCa ({args.resamples} resamples) floored by paired t, {args.experiments} experiments per effect"
    )
    print(f"  {'design':<16} {'blocks':>6}  " + "  ".join(f"{o[:6]:>6}" for o in OUTCOMES) + "  wrong")
    t0 = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    savings: list[str] = []
    for effect in EFFECTS:
        # Same experiments for every design; columns past max_blocks only serve the equivalence search.
        codes = simulate_paths(
            args.experiments, effect, args.block_sd, args.band, top, rng, min_blocks=lo, n_resamples=args.resamples
        )

        def design(n_min: int, n_max: int, adaptive: bool) -> SimResult:
            final, blocks = stopping_outcomes(codes, n_min, n_max, adaptive)
            return summarize(final, blocks, effect, args.band)

        fixed = design(args.fixed, args.fixed, False)
        fixed_max = design(args.max_blocks, args.max_blocks, False)
        adaptive = design(args.min_blocks, args.max_blocks, True)
        print(f"true effect {effect:+.0%}")
        print(row(f"fixed {args.fixed}", fixed))
        print(row(f"fixed {args.max_blocks}", fixed_max))
        print(row(f"adaptive {args.min_blocks}-{args.max_blocks}", adaptive))
        decisive = 1 - adaptive.decision_rates["inconclusive"]
        match = next(
            (n for n in range(lo, top + 1) if 1 - design(n, n, False).decision_rates["inconclusive"] >= decisive),
            None,
        )
        if match is None:
            savings.append(
                f"  {effect:+4.0%}: adaptive decides {decisive:.1%} with {adaptive.mean_blocks:.2f} blocks; "
                f"no fixed design up to {top} blocks decides as often"
            )
        else:
            m = design(match, match, False)
            savings.append(
                f"  {effect:+4.0%}: adaptive {adaptive.mean_blocks:5.2f} blocks, decisive {decisive:6.1%}, "
                f"wrong {adaptive.wrong_rate:5.2%} | fixed {match:2d} blocks, decisive "
                f"{1 - m.decision_rates['inconclusive']:6.1%}, wrong {m.wrong_rate:5.2%} | "
                f"saves {match - adaptive.mean_blocks:5.2f} blocks per arm"
            )
    print("\nsmallest fixed design at least as decisive as adaptive (same experiments):")
    print("\n".join(savings))
    print(f"\nwall time {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
