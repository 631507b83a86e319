"""The sequential decision of each candidate arm, as the report's Conclusion states it: the effect and its
interval, the test, the rounds used and why the run stopped there, the variance assumed and its source,
how the rounds' values were paired, and for an undecided arm how many more rounds would likely decide.
"""

from __future__ import annotations

from specwatch.analysis.sequential import SequentialDecision, SequentialDesign, UnitResult
from specwatch.analysis.verdict import ArmDecision
from specwatch.spec.workload import BATCHED_CONCURRENCY


def _effect(u: UnitResult) -> str:
    i = u.interval
    if i is None:
        return "no rounds with a value"
    if i.high == float("inf"):
        return f"{i.estimate:+.1%}, no interval yet ({u.rounds} round(s))"
    return f"{i.estimate:+.1%} [{i.low:+.1%}, {i.high:+.1%}] over {u.rounds} round(s)"


def stopped(d: SequentialDecision, design: SequentialDesign) -> str:
    """Why the run has the rounds it has."""
    if d.outcome == "CONTINUE":
        return f"the run stopped after {d.rounds} round(s), before the looks decided (interrupted or launches failed)"
    if design.min_rounds == design.max_rounds:
        return f"fixed design: {design.max_rounds} round(s), one look"
    if d.outcome == "INCONCLUSIVE":
        return f"the maximum of {design.max_rounds} rounds was reached undecided"
    return (f"decided at the look after round {d.rounds} (looks after rounds {design.min_rounds}..{design.max_rounds};"
            " rounds are added only while undecided)")


def decision_lines(ad: ArmDecision, design: SequentialDesign, baseline: str) -> list[str]:
    d = ad.decision
    variance = d.variance
    lines = [
        f"- `{ad.arm}` vs `{baseline}`: **{d.outcome}**: {d.reason}",
        f"  - effect ({d.composite.metric}, composite: the per-round mean over the cells, + is better): "
        f"{_effect(d.composite)}; a repeated confidence interval, valid at whichever look the run stopped",
        f"  - test: {d.test}",
        f"  - rounds: {d.rounds}; {stopped(d, design)}",
        "  - variance assumed: " + (f"sd {variance.sd:.3f} of the per-round log-ratio, t with {variance.df} df; "
                                    f"source: {variance.source}" if variance else "none yet (too few rounds)"),
        f"  - pairing: {ad.comparison.pairing}; at c>={BATCHED_CONCURRENCY} decode tok/s is judged on aggregate "
        "throughput",
    ]
    if d.outcome == "INCONCLUSIVE":
        lines.append("  - more rounds: " + (f"about {d.more_rounds} more would likely (50%) decide, at this estimate "
                                            "and variance" if d.more_rounds else
                                            "not estimable, or the estimate sits on the band's edge"))
    return lines
