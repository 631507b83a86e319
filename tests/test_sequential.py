"""The sequential decision over rounds (specwatch.analysis.sequential): planted effects, the per-cell
veto, the prior-variance rule, bad input, and properties. Error rates are measured by
benchmarks/sequential_error_rates.py, not here."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.sequential_error_rates import decide_paths
from specwatch.analysis.sequential import (
    OUTCOMES,
    CellSeries,
    PriorVariance,
    SequentialDesign,
    decide,
    first_call,
    look_alpha,
    rounds_needed,
)

DESIGN = SequentialDesign()  # alpha 0.05, band 5%, rounds 3..10
METRIC = "decode_tok_s"


def planted(effect: float, sd: float, rounds: int, cells: tuple[str, ...] = ("c1",), seed: int = 0,
            prior: PriorVariance | None = None) -> list[CellSeries]:
    rng = np.random.default_rng(seed)
    return [CellSeries(c, METRIC, tuple(math.log1p(effect) + rng.normal(0, sd, rounds)), prior) for c in cells]


def test_large_gain_promotes_at_the_minimum():
    got = decide(planted(0.30, 0.01, 3, ("c1", "c16")), DESIGN)
    assert got.outcome == "PROMOTE"
    assert got.rounds == 3
    assert got.composite.interval is not None and got.composite.interval.low > 0.05
    assert {u.cell for u in got.cells} == {"c1", "c16"}
    assert "this run" in (got.variance.source if got.variance else "")
    assert "alpha spending" in got.test


def test_large_loss_reverts():
    assert decide(planted(-0.30, 0.01, 3, ("c1", "c16")), DESIGN).outcome == "REVERT"


def test_zero_with_low_noise_is_no_change():
    got = decide(planted(0.0, 0.005, 3, ("c1", "c16")), DESIGN)
    assert got.outcome == "NO CHANGE"
    assert got.composite.interval.low > -0.05 and got.composite.interval.high < 0.05  # type: ignore[union-attr]


def test_zero_with_huge_noise_is_inconclusive_at_the_maximum_with_an_estimate_of_more_rounds():
    got = decide(planted(0.0, 0.5, DESIGN.max_rounds, seed=3), DESIGN)
    assert got.outcome == "INCONCLUSIVE"
    assert "maximum of 10 rounds" in got.reason
    assert got.more_rounds is None or got.more_rounds >= 1
    # +8% with a round sd of 0.1: its interval still reaches below +5% after 10 rounds
    wobble = tuple(math.log1p(0.08) + 0.1 * (-1) ** i for i in range(DESIGN.max_rounds))
    undecided = decide([CellSeries("c1", METRIC, wobble)], DESIGN)
    assert undecided.outcome == "INCONCLUSIVE"
    assert undecided.more_rounds is not None and undecided.more_rounds > 0


def test_below_the_minimum_rounds_it_continues_whatever_the_data():
    got = decide(planted(0.50, 0.001, 2), DESIGN)
    assert got.outcome == "CONTINUE"
    assert "minimum 3" in got.reason


def test_a_clearly_worse_cell_is_not_hidden_by_the_composite():
    # k7-like: two cells +30%, one -14%; the composite is about +13%, clear of the band
    cells = planted(0.30, 0.01, 4, ("c1 code", "c1 prose")) + planted(-0.14, 0.01, 4, ("c64",), seed=1)
    got = decide(cells, DESIGN)
    assert got.composite.interval is not None and got.composite.interval.low > 0.05
    assert got.outcome == "REVERT"
    assert "c64" in got.reason


def test_a_cell_not_shown_non_inferior_vetoes_promote():
    steady = tuple(math.log1p(0.3) + d for d in (0.001, -0.001, 0.0, 0.001, -0.001))
    cells = [CellSeries("c1 code", METRIC, steady), CellSeries("c1 prose", METRIC, steady),
             CellSeries("c64", METRIC, (0.06, -0.06, 0.05, -0.05, 0.0))]
    got = decide(cells, DESIGN)
    assert got.composite.interval is not None and got.composite.interval.low > 0.05
    assert got.outcome == "CONTINUE"
    assert "not shown non-inferior" in got.reason and "c64" in got.reason


def test_a_prior_that_agrees_is_pooled_and_decides_before_three_rounds():
    design = SequentialDesign(min_rounds=2)
    prior = PriorVariance(0.02, 20, "A/A 2026-12-01 cpu x86 model abc")
    values = (math.log1p(0.3) + 0.02, math.log1p(0.3) - 0.01)
    got = decide([CellSeries("c1", METRIC, values, prior)], design, {METRIC: prior})
    assert got.outcome == "PROMOTE"
    assert got.variance is not None and got.variance.df == 21
    assert got.variance.source.startswith("pooled: A/A 2026-12-01")
    # without the prior, two rounds never decide (measurement rule 7)
    assert decide([CellSeries("c1", METRIC, values)], design).outcome == "CONTINUE"


def test_a_prior_the_run_disagrees_with_falls_back_to_the_run():
    prior = PriorVariance(0.01, 20, "A/A of the baseline")
    values = tuple(math.log1p(0.3) + np.array([0.4, -0.4, 0.35, -0.3]))  # sd ~0.4, forty times the prior
    got = decide([CellSeries("c1", METRIC, values, prior)], DESIGN, {METRIC: prior})
    assert got.variance is not None
    assert got.variance.df == 3
    assert "disagrees" in got.variance.source
    assert got.outcome == "CONTINUE"


def test_a_prior_with_too_few_pooled_df_is_not_used():
    prior = PriorVariance(0.2, 1, "one A/A round")
    got = decide(planted(0.0, 0.2, 3, prior=prior), DESIGN, {METRIC: prior})
    assert got.variance is not None and got.variance.df == 2
    assert "too few pooled df" in got.variance.source


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"min_rounds": 3, "max_rounds": 2}, "design.max_rounds=2"),
    ({"alpha": 0.5}, "design.alpha=0.5"),
    ({"alpha": 0.0}, "design.alpha=0.0"),
    ({"band": 0.0}, "design.band=0.0"),
    ({"cell_margin": 0.01}, "design.cell_margin=0.01"),
])
def test_bad_design_is_one_line_naming_field_value_and_fix(kwargs, field):
    with pytest.raises(ValueError) as err:
        SequentialDesign(**kwargs)
    message = str(err.value)
    assert message.startswith(field)
    assert "fix:" in message and "\n" not in message


def test_bad_series_is_one_line():
    with pytest.raises(ValueError, match=r"^series lengths=\[2, 3\].*fix:"):
        decide([CellSeries("a", METRIC, (0.1, 0.2)), CellSeries("b", METRIC, (0.1, 0.2, 0.3))], DESIGN)
    with pytest.raises(ValueError, match=r"^rounds=11 exceeds design.max_rounds=10.*fix:"):
        decide(planted(0.1, 0.1, 11), DESIGN)


def test_a_rejected_cell_drops_that_round_from_the_composite():
    cells = [CellSeries("c1", METRIC, (0.3, 0.31, 0.29, 0.3)), CellSeries("c64", METRIC, (0.3, math.nan, 0.3, 0.31))]
    got = decide(cells, DESIGN)
    assert got.composite.rounds == 3
    assert got.outcome == "PROMOTE"


def test_a_cell_rejected_in_every_round_leaves_no_composite_and_never_promotes():
    # like the old rule's "missing level": a composite without one of its cells is not the composite
    cells = planted(0.30, 0.01, DESIGN.max_rounds, ("c1",)) + [CellSeries("c64", METRIC, (math.nan,) * 10)]
    got = decide(cells, DESIGN)
    assert got.outcome == "INCONCLUSIVE"
    assert got.composite.rounds == 0 and "(no rounds)" in got.reason


def test_a_second_metric_is_guarded_and_can_revert():
    steady = tuple(math.log1p(0.3) + d for d in (0.001, -0.001, 0.0, 0.001))
    worse = tuple(math.log1p(-0.3) + d for d in (0.001, -0.001, 0.0, 0.001))  # TTFT 30% worse, normalised
    got = decide([CellSeries("c1", METRIC, steady), CellSeries("c1", "ttft_ms_p50", worse)], DESIGN)
    assert got.outcome == "REVERT"
    assert "ttft_ms_p50 composite" in got.reason
    assert got.composite.metric == METRIC


def test_alpha_spending_adds_up_to_alpha():
    spent = sum(look_alpha(DESIGN, n) for n in range(1, DESIGN.max_rounds + 1))
    assert spent == pytest.approx(DESIGN.alpha)
    assert look_alpha(DESIGN, DESIGN.min_rounds - 1) == 0.0


def test_rounds_needed_falls_with_the_effect_and_rises_with_the_noise():
    assert rounds_needed(0.05, DESIGN, 0.20) < rounds_needed(0.05, DESIGN, 0.10)  # type: ignore[operator]
    assert rounds_needed(0.02, DESIGN, 0.10) < rounds_needed(0.08, DESIGN, 0.10)  # type: ignore[operator]
    assert rounds_needed(0.02, DESIGN, 0.10, prior_df=20) <= rounds_needed(0.02, DESIGN, 0.10)  # type: ignore[operator]
    assert rounds_needed(0.01, DESIGN, 0.30) == DESIGN.min_rounds
    with pytest.raises(ValueError, match="^power=1.5"):
        rounds_needed(0.05, DESIGN, 0.1, power=1.5)


def test_the_simulation_applies_the_same_rule_as_first_call():
    rng = np.random.default_rng(7)
    design = SequentialDesign(min_rounds=2, max_rounds=6)
    prior = PriorVariance(0.05, 8, "sim")
    for effect in (0.0, 0.08, -0.08, 0.2):
        y = math.log1p(effect) + rng.normal(0, 0.06, (5, 3, design.max_rounds))
        for priors in ((None, None, None), (prior, prior, prior)):
            codes, rounds = decide_paths(y, design, priors=(priors, priors[0]))
            for run in range(y.shape[0]):
                series = [CellSeries(f"c{j}", METRIC, tuple(y[run, j]), priors[j]) for j in range(3)]
                want = first_call(series, design, {METRIC: priors[0]} if priors[0] else None)
                assert (OUTCOMES[codes[run]], int(rounds[run])) == (want.outcome, want.rounds)


value = st.floats(-0.6, 0.6, allow_nan=False).map(lambda v: round(v, 4))


def around(rounds: int, centre: float) -> st.SearchStrategy[list[float]]:
    return st.lists(st.floats(-0.03, 0.03).map(lambda v: round(centre + v, 4)), min_size=rounds, max_size=rounds)


# Rounds spread anywhere, or tight around a common effect (so that decided outcomes come up often).
centred = st.tuples(st.integers(3, 10), st.floats(-0.4, 0.4))
values = st.one_of(st.lists(value, min_size=1, max_size=10), centred.flatmap(lambda nc: around(*nc)))
# 2-4 cells with the same number of rounds
grids = st.one_of(
    st.integers(1, 10).flatmap(lambda n: st.lists(st.lists(value, min_size=n, max_size=n), min_size=2, max_size=4)),
    centred.flatmap(lambda nc: st.lists(around(*nc), min_size=2, max_size=4)),
)
SWAP = {"PROMOTE": "REVERT", "REVERT": "PROMOTE"}


@settings(max_examples=40, deadline=None)
@given(values)
def test_mirror_one_cell_negating_every_value_swaps_promote_and_revert(xs):
    got = decide([CellSeries("c1", METRIC, tuple(xs))], DESIGN).outcome
    mirrored = decide([CellSeries("c1", METRIC, tuple(-x for x in xs))], DESIGN).outcome
    assert mirrored == SWAP.get(got, got)


@settings(max_examples=30, deadline=None)
@given(grids)
def test_mirror_many_cells_a_promote_negated_reverts(rows):
    series = [CellSeries(f"c{i}", METRIC, tuple(r)) for i, r in enumerate(rows)]
    if decide(series, DESIGN).outcome == "PROMOTE":
        negated = [CellSeries(s.cell, s.metric, tuple(-v for v in s.values)) for s in series]
        assert decide(negated, DESIGN).outcome == "REVERT"


@settings(max_examples=40, deadline=None)
@given(values, values)
def test_rounds_after_a_call_never_change_it(xs, extra):
    extra = extra[: DESIGN.max_rounds - len(xs)]
    got = first_call([CellSeries("c1", METRIC, tuple(xs))], DESIGN)
    if got.outcome != "CONTINUE":
        later = first_call([CellSeries("c1", METRIC, tuple(xs) + tuple(extra))], DESIGN)
        assert (later.outcome, later.rounds, later.composite) == (got.outcome, got.rounds, got.composite)


@settings(max_examples=30, deadline=None)
@given(grids, st.floats(0.0, 0.5))
def test_shifting_every_value_up_keeps_a_promote_and_cell_order_does_not_matter(rows, shift):
    series = [CellSeries(f"c{i}", METRIC, tuple(r)) for i, r in enumerate(rows)]
    got = decide(series, DESIGN).outcome
    assert decide(series[::-1], DESIGN).outcome == got
    if got == "PROMOTE":
        up = [CellSeries(s.cell, s.metric, tuple(v + shift for v in s.values)) for s in series]
        assert decide(up, DESIGN).outcome == "PROMOTE"
