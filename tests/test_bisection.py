"""The bisect's search on fake outcomes (specwatch/analysis/bisection.py): which A/Bs it runs, and what it
concludes. Each fake A/B calls the truth: versions have speed levels, a step between them beyond 10% is a
gain or a regression, anything closer is flat; some pairs are planted as inconclusive, some images fail."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from specwatch.analysis.bisection import (
    Call,
    Pair,
    StepCall,
    Survey,
    conclusion,
    default_max_steps,
    error_statement,
    next_pair,
    step_alpha,
    survey,
)


def bisect(levels: Sequence[float], *, broken: set[int] = frozenset(), unsure: set[tuple[int, int]] = frozenset(),
           max_steps: int | None = None) -> tuple[list[StepCall], Survey, str]:
    names = [f"v{i}" for i in range(len(levels))]
    budget = max_steps or default_max_steps(len(levels))
    calls: list[StepCall] = []
    while (pair := next_pair(names, calls, budget)) is not None:
        calls.append(oracle(pair, levels, broken, unsure))
        assert len(calls) <= budget
    s = survey(names, calls, budget)
    return calls, s, conclusion(s, names)


def oracle(pair: Pair, levels: Sequence[float], broken: set[int], unsure: set[tuple[int, int]]) -> StepCall:
    failed = tuple(i for i in (pair.older, pair.newer) if i in broken)
    if failed:
        return StepCall(pair, "failed", failed)
    if (pair.older, pair.newer) in unsure:
        return StepCall(pair, "inconclusive")
    delta = levels[pair.newer] / levels[pair.older] - 1
    call: Call = "gain" if delta > 0.1 else "regression" if delta < -0.1 else "flat"
    return StepCall(pair, call)


def pairs(calls: list[StepCall]) -> list[tuple[str, int, int]]:
    return [(c.pair.kind, c.pair.older, c.pair.newer) for c in calls]


def test_a_single_regression_in_the_middle_is_found_and_verified_within_the_budget() -> None:
    calls, s, line = bisect([100, 100, 100, 100, 60, 60, 60])
    # (0, 3) flat: (3, 6) holds the change, unmeasured; its halves (3, 5) and (5, 6), then (3, 4) and (4, 5)
    assert pairs(calls) == [("endpoints", 0, 6), ("step", 0, 3), ("step", 3, 5), ("step", 5, 6), ("step", 3, 4),
                            ("step", 4, 5), ("verify", 3, 4)]
    assert [(c.older, c.newer, c.direction, c.verified) for c in s.culprits] == [(3, 4, "regression", "regression")]
    assert line == "culprit: regression at v4 (against v3)"


@pytest.mark.parametrize(("levels", "culprit"), [([100, 50, 50, 50, 50], (0, 1)), ([100, 100, 100, 100, 150], (3, 4))])
def test_a_culprit_at_either_end_is_found(levels: list[float], culprit: tuple[int, int]) -> None:
    calls, s, line = bisect(levels)
    assert [(c.older, c.newer) for c in s.confirmed] == [culprit]
    assert line.startswith("culprit: ") and f"at v{culprit[1]} (against v{culprit[0]})" in line
    assert calls[-1].pair == Pair(*culprit, "verify")


def test_a_flat_half_lets_the_other_half_be_inferred_not_measured() -> None:
    calls, s, _ = bisect([100, 100, 100, 100, 150])
    # (0, 2) flat: the change is in (2, 4); (2, 3) flat: it is (3, 4), which only its verification measures
    assert pairs(calls) == [("endpoints", 0, 4), ("step", 0, 2), ("step", 2, 3), ("verify", 3, 4)]
    assert s.culprits[0].inferred is True and s.confirmed == s.culprits
    calls, s, _ = bisect([100, 150, 150])
    assert pairs(calls) == [("endpoints", 0, 2), ("step", 0, 1), ("step", 1, 2), ("verify", 0, 1)]
    assert s.culprits[0].inferred is False


def test_a_gain_and_a_later_regression_are_both_reported_not_one_culprit() -> None:
    calls, s, line = bisect([100, 200, 200, 120], max_steps=7)
    assert [(c.older, c.newer, c.direction) for c in s.confirmed] == [(0, 1, "gain"), (2, 3, "regression")]
    assert line == "several changes, no single culprit: gain at v1 (against v0), regression at v3 (against v2)"


def test_a_change_spread_over_versions_is_said_so() -> None:
    # three 5% drops: the endpoints differ (-14%), no single version does
    _, s, line = bisect([100, 95, 90.25, 85.7])
    assert s.confirmed == []
    assert line.startswith("no culprit confirmed") and "spread over several versions" in " ".join(s.notes) + line


def test_an_inconclusive_half_is_reported_and_not_narrowed() -> None:
    calls, s, line = bisect([100, 100, 100, 100, 60, 60, 60], unsure={(3, 5)})
    assert ("step", 3, 4) not in pairs(calls) and ("step", 5, 6) in pairs(calls)
    assert s.confirmed == [] and any("v3 .. v5: inconclusive, not narrowed further" in n for n in s.notes)
    assert line.startswith("no culprit confirmed: v3 .. v5: inconclusive")


def test_an_image_that_fails_is_skipped_and_listed() -> None:
    calls, s, line = bisect([100, 100, 100, 60, 60], broken={2})
    assert s.skipped == [2]
    assert ("failed", (2,)) in [(c.call, c.failed) for c in calls]
    assert [(c.older, c.newer) for c in s.confirmed] == [(1, 3)]  # v2 between them never booted
    assert line == "culprit: regression at v3 or skipped v2 (against v1)"


def test_a_failed_endpoint_moves_the_range_to_the_next_image_that_boots() -> None:
    calls, s, _ = bisect([100, 100, 100, 60], broken={0})
    assert pairs(calls)[:2] == [("endpoints", 0, 3), ("endpoints", 1, 3)]
    assert s.skipped == [0] and [(c.older, c.newer) for c in s.confirmed] == [(2, 3)]


def test_endpoints_not_decided_apart_stop_the_bisect() -> None:
    calls, s, line = bisect([100, 60, 100])
    assert pairs(calls) == [("endpoints", 0, 2)]
    assert line == "the endpoints are not decided apart (flat): there is no change to bisect"


def test_the_budget_stops_the_search_and_says_what_was_not_measured() -> None:
    calls, s, line = bisect([100, 200, 200, 120], max_steps=4)
    assert len(calls) == 4
    assert any("the budget of 4 A/Bs is spent" in n for n in s.notes)


def test_a_verification_that_disagrees_names_no_culprit() -> None:
    calls, s, line = bisect([100, 100, 60], unsure={(1, 2)})  # (1, 2) was inferred, its verification unsure
    assert s.culprits[0].verified == "inconclusive" and s.confirmed == []
    assert "no culprit confirmed" in line


def test_the_step_alpha_bounds_the_family_wise_error() -> None:
    assert default_max_steps(7) == 8 and default_max_steps(3) == 4 and default_max_steps(5) == 6
    alpha = step_alpha(0.10, 8)
    assert alpha * 1.5 * 8 == pytest.approx(0.10)
    assert "at most 10%" in error_statement(0.10, 8) and f"{alpha:.4f}" in error_statement(0.10, 8)
