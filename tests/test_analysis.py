"""specwatch.analysis: round order, CI maths, verdict rule, cost model, adaptive stopping."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sst

from specwatch.analysis.acceptance import decay, tail_collapsed
from specwatch.analysis.cost import fit_step_time, predict_k, prediction_error, step_time_from
from specwatch.analysis.decision import CellVerdict, VerdictRule, classify, experiment_verdict
from specwatch.analysis.intervals import (
    METHOD_HULL,
    METHOD_NONE,
    METHOD_T,
    DiffCI,
    log_ratio_interval,
    relative_diff_ci,
)
from specwatch.analysis.rounds import pair_rounds, round_order
from specwatch.analysis.sequential import CellSeries, SequentialDecision, SequentialDesign, decide
from specwatch.records import CellKey

DOMAIN_K7 = [0.94, 0.86, 0.77, 0.69, 0.61, 0.49, 0.35]

# ------------------------------------------------------------------------------------ round order


def _arms(order: list[tuple[str, int]]) -> str:
    return " ".join(a for a, _ in order)


def test_two_arms_follow_thue_morse() -> None:
    order = round_order(["A", "B"], 3)
    assert order == [("A", 1), ("B", 1), ("B", 2), ("A", 2), ("B", 3), ("A", 3)]
    assert _arms(round_order(["A", "B"], 8)) == " ".join("AB"[bin(i).count("1") % 2] for i in range(16))


def test_two_arms_cancel_polynomial_drift() -> None:
    # 16 launches = 2^4: sums of position^d agree for d <= 3 (Prouhet-Tarry-Escott).
    order = round_order(["A", "B"], 8)
    pos = {arm: [i for i, (a, _) in enumerate(order) if a == arm] for arm in "AB"}
    for d in range(4):
        assert sum(p**d for p in pos["A"]) == sum(p**d for p in pos["B"])


def _check_balance(arms: list[str], cycle_rounds: int) -> None:
    m = len(arms)
    order = round_order(arms, cycle_rounds)
    assert len(order) == m * cycle_rounds
    rounds = [order[i : i + m] for i in range(0, len(order), m)]
    # 1. round i holds the i-th launch of every arm
    for i, rnd in enumerate(rounds, start=1):
        assert sorted(a for a, _ in rnd) == sorted(arms)
        assert {b for _, b in rnd} == {i}
    # 2. linear drift cancels after every even number of rounds
    for r in range(2, cycle_rounds + 1, 2):
        prefix = order[: r * m]
        sums = {arm: sum(i for i, (a, _) in enumerate(prefix) if a == arm) for arm in arms}
        assert len(set(sums.values())) == 1, sums
    # 3. position balance and within-round carry-over balance over the full cycle
    positions = Counter((a, j) for rnd in rounds for j, (a, _) in enumerate(rnd))
    assert set(positions.values()) == {cycle_rounds // m}
    follows = Counter((rnd[j][0], rnd[j + 1][0]) for rnd in rounds for j in range(m - 1))
    assert len(follows) == m * (m - 1)
    assert len(set(follows.values())) == 1, follows


@pytest.mark.parametrize(("arms", "cycle"), [(["A", "B", "C"], 6), (["A", "B", "C", "D"], 4), (list("ABCDE"), 10)])
def test_more_arms_are_balanced(arms: list[str], cycle: int) -> None:
    _check_balance(arms, cycle)
    _check_balance(arms, 2 * cycle)


def test_round_order_extends_as_a_prefix() -> None:
    # adaptive stopping adds one round at a time; the earlier launches must not change
    for arms in (["A", "B"], ["A", "B", "C"], list("ABCD")):
        for n in range(12):
            assert round_order(arms, n + 1)[: n * len(arms)] == round_order(arms, n)


def test_round_order_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        round_order(["A", "A"], 3)
    with pytest.raises(ValueError):
        round_order([], 3)
    assert round_order(["A", "B"], 0) == []


def test_pair_rounds_pairs_adjacent_launches() -> None:
    order = round_order(["base", "cand"], 5)
    pairs = pair_rounds(order, "base", "cand")
    assert pairs == [(i, i) for i in range(1, 6)]
    index = {launch: i for i, launch in enumerate(order)}
    for b, c in pairs:
        assert abs(index[("base", b)] - index[("cand", c)]) == 1
    # three arms: partners share a round
    order3 = round_order(["x", "y", "z"], 4)
    index3 = {launch: i for i, launch in enumerate(order3)}
    for b, c in pair_rounds(order3, "x", "z"):
        assert index3[("x", b)] // 3 == index3[("z", c)] // 3
    # a trailing launch without a partner is left out
    assert pair_rounds(order[:-1], "base", "cand") == [(i, i) for i in range(1, 5)]


# ---------------------------------------------------------------------------------------- CI maths


def test_constant_ratio_gives_tight_ci_at_the_effect() -> None:
    rng = np.random.default_rng(3)
    base = rng.uniform(45, 65, 6)
    cand = base * 1.10 * np.exp(rng.normal(0, 1e-4, 6))
    ci = relative_diff_ci(base, cand)
    assert ci is not None and ci.n_pairs == 6 and ci.method == METHOD_HULL
    assert ci.estimate == pytest.approx(0.10, abs=1e-3)
    assert 0.099 < ci.low <= ci.estimate <= ci.high < 0.101


def test_identical_arms_contain_zero() -> None:
    rng = np.random.default_rng(4)
    base = rng.normal(55, 6, 5)
    cand = rng.normal(55, 6, 5)
    ci = relative_diff_ci(base, cand)
    assert ci is not None and ci.low < 0 < ci.high
    same = relative_diff_ci(base, base)
    assert same is not None and same.estimate == 0 and same.low == 0 == same.high


def test_few_rounds_give_wider_interval() -> None:
    rng = np.random.default_rng(5)
    base = rng.normal(55, 5.5, 12)
    cand = 1.05 * rng.normal(55, 5.5, 12)
    small = relative_diff_ci(base[:3], cand[:3])
    large = relative_diff_ci(base, cand)
    assert small is not None and large is not None
    assert small.width > 2 * large.width


def test_interval_is_never_narrower_than_t() -> None:
    rng = np.random.default_rng(6)
    base = rng.normal(55, 5.5, 8)
    cand = rng.normal(58, 5.5, 8)
    ci = relative_diff_ci(base, cand)
    d = np.log(cand / base)
    half = sst.t.ppf(0.975, 7) * d.std(ddof=1) / math.sqrt(8)
    assert ci is not None
    assert ci.low <= math.expm1(d.mean() - half) + 1e-12
    assert ci.high >= math.expm1(d.mean() + half) - 1e-12


def test_small_and_degenerate_inputs() -> None:
    assert relative_diff_ci([], []) is None
    assert relative_diff_ci([50.0], [float("nan")]) is None
    one = relative_diff_ci([50.0], [55.0])
    assert one is not None and one.method == METHOD_NONE and one.low == -1 and math.isinf(one.high)
    assert classify(one, 0.05) == "inconclusive"
    two = relative_diff_ci([50.0, 52.0], [55.0, 56.0])
    assert two is not None and two.method == METHOD_T and two.n_pairs == 2
    # a rejected round (NaN) drops its pair rather than counting as zero
    dropped = relative_diff_ci([50.0, float("nan"), 60.0, 55.0], [55.0, 40.0, 66.0, 60.5])
    assert dropped is not None and dropped.n_pairs == 3
    with pytest.raises(ValueError):
        relative_diff_ci([50.0, 0.0], [50.0, 50.0])
    with pytest.raises(ValueError):
        relative_diff_ci([50.0, 51.0], [50.0])


@pytest.mark.parametrize("n", [3, 4, 6])
def test_coverage_by_simulation(n: int) -> None:
    # True effect 0; each arm's round median carries 10 % noise; 2000 experiments at once.
    rng = np.random.default_rng(100 + n)
    base = 55 * (1 + 0.10 * rng.standard_normal((2000, n)))
    cand = 55 * (1 + 0.10 * rng.standard_normal((2000, n)))
    d = np.log(cand / base)
    _, low, high, method = log_ratio_interval(d, 0.95, n_resamples=2000, rng=rng)
    assert method == METHOD_HULL
    coverage = float(np.mean((low <= 0) & (high >= 0)))
    assert coverage >= 0.93, coverage
    # Why not a plain percentile bootstrap: on the same experiments it misses far more often.
    pct = sst.bootstrap((d,), np.mean, axis=-1, method="percentile", n_resamples=2000, rng=rng)
    pct_cov = float(np.mean((pct.confidence_interval.low <= 0) & (pct.confidence_interval.high >= 0)))
    assert pct_cov < coverage - 0.05, (pct_cov, coverage)


def test_coverage_with_a_real_effect() -> None:
    rng = np.random.default_rng(7)
    base = 55 * (1 + 0.10 * rng.standard_normal((2000, 4)))
    cand = 55 * 1.08 * (1 + 0.10 * rng.standard_normal((2000, 4)))
    _, low, high, _ = log_ratio_interval(np.log(cand / base), n_resamples=2000, rng=rng)
    # truth on the log scale: E log(1.08 (1+e1)/(1+e2)) = log 1.08 (the noise terms cancel)
    truth = math.log(1.08)
    assert float(np.mean((low <= truth) & (high >= truth))) >= 0.93


# ---------------------------------------------------------------------------------------- classify


def _ci(low: float, high: float, n: int = 6) -> DiffCI:
    return DiffCI((low + high) / 2, low, high, n, METHOD_HULL)


def test_classify_each_branch() -> None:
    assert classify(_ci(0.06, 0.20), 0.05) == "gain"
    assert classify(_ci(-0.20, -0.06), 0.05) == "regression"
    assert classify(_ci(-0.04, 0.05), 0.05) == "flat"
    assert classify(_ci(0.02, 0.12), 0.05) == "inconclusive"
    assert classify(_ci(-0.30, 0.30), 0.05) == "inconclusive"
    assert classify(None, 0.05) == "inconclusive"
    assert classify(_ci(0.05, 0.20), 0.05) == "inconclusive"  # touching the edge is not clearing it


def test_acceptance_curve_helpers() -> None:
    assert decay(DOMAIN_K7) == pytest.approx(0.35 / 0.94)
    assert decay([]) is None and decay([0.0, 0.0]) is None
    assert not tail_collapsed(DOMAIN_K7)
    assert tail_collapsed([0.7, 0.4, 0.15])
    assert tail_collapsed(DOMAIN_K7, floor=0.4)
    assert not tail_collapsed([])
    assert VerdictRule(tail_floor=0.5).tail_collapsed(DOMAIN_K7)


# ----------------------------------------------------------------------------------------- verdict


def _cell(outcome: str, concurrency: int = 1, prompt_class: str = "code", metric: str = "decode_tok_s") -> CellVerdict:
    ci = {
        "gain": _ci(0.08, 0.20),
        "regression": _ci(-0.20, -0.08),
        "flat": _ci(-0.03, 0.03),
        "inconclusive": _ci(-0.10, 0.20),
    }[outcome]
    key = CellKey(concurrency=concurrency, prompt_class=prompt_class, prompt_tokens=128)
    cell = CellVerdict.from_ci("k7", key, metric, ci, band=0.05)
    assert cell.outcome == outcome
    return cell


def test_per_cell_outcomes_follow_the_metric_direction() -> None:
    assert [_cell(o).outcome for o in ("gain", "regression", "flat", "inconclusive")] == \
        ["gain", "regression", "flat", "inconclusive"]
    # TTFT 8-20 % higher is worse; TTFT 8-20 % lower is better
    ttft = CellKey(concurrency=1, prompt_class="code", prompt_tokens=128)
    assert CellVerdict.from_ci("k7", ttft, "ttft", _ci(0.08, 0.20), 0.05, higher_is_better=False).outcome == \
        "regression"
    assert CellVerdict.from_ci("k7", ttft, "ttft", _ci(-0.20, -0.08), 0.05, higher_is_better=False).outcome == "gain"


def _decided(effect: float, sd: float = 0.005, rounds: int = 3, cells: tuple[str, ...] = ("c=1 code", "c=4 code"),
             max_rounds: int = 3) -> SequentialDecision:
    rng = np.random.default_rng(1)
    series = [CellSeries(c, "decode_tok_s", tuple(math.log1p(effect) + rng.normal(0, sd, rounds))) for c in cells]
    return decide(series, SequentialDesign(min_rounds=3, max_rounds=max_rounds))


GAIN, LOSS, SAME, NOISY = _decided(0.2), _decided(-0.2), _decided(0.0), _decided(0.0, sd=0.3)


def test_verdict_promote_when_every_arm_promotes_or_shows_no_change() -> None:
    assert (GAIN.outcome, SAME.outcome, LOSS.outcome, NOISY.outcome) == \
        ("PROMOTE", "NO CHANGE", "REVERT", "INCONCLUSIVE")
    v = experiment_verdict([("k7", GAIN)], [], [], [])
    assert v.decision == "PROMOTE" and v.reasons == []
    assert v.arm_reasons[0].startswith("k7: PROMOTE after 3 round(s): decode_tok_s composite +20.")
    assert experiment_verdict([("k7", GAIN), ("k5", SAME)], [], [], []).decision == "PROMOTE"


def test_verdict_revert_on_an_arm_that_reverts() -> None:
    v = experiment_verdict([("k7", GAIN), ("k5", LOSS)], [], [], [])
    assert v.decision == "REVERT" and v.arm_reasons[0].startswith("k5: ") and "below -5%" in v.arm_reasons[0]


def test_verdict_revert_on_tail_collapse() -> None:
    v = experiment_verdict([("k7", GAIN)], ["k7"], [], [])
    assert v.decision == "REVERT" and any("tail collapse" in r for r in v.reasons)


def test_verdict_revert_on_correctness_even_when_faster() -> None:
    v = experiment_verdict([("k7", GAIN)], [], ["k7: probe 3 diverges at token 17"], [])
    assert v.decision == "REVERT"
    assert v.reasons == ["correctness: greedy output changed: k7: probe 3 diverges at token 17"]


def test_verdict_inconclusive_says_how_many_more_rounds() -> None:
    v = experiment_verdict([("k7", GAIN), ("k5", NOISY)], [], [], [])
    assert v.decision == "INCONCLUSIVE"
    (reason,) = v.arm_reasons
    assert reason.startswith("k5: maximum of 3 rounds reached")
    assert "more round(s) would likely decide" in reason or "band's edge" in reason
    # a run stopped before its looks ended (interrupted) is undecided too
    stopped = decide([CellSeries("c=1 code", "decode_tok_s", (0.18, 0.2))], SequentialDesign(max_rounds=6))
    v = experiment_verdict([("k7", stopped)], [], [], [])
    assert v.decision == "INCONCLUSIVE" and "stopped after 2 round(s)" in v.arm_reasons[0]


def test_verdict_no_change_missing_levels_and_require_gain() -> None:
    v = experiment_verdict([("k7", SAME)], [], [], [])
    assert v.decision == "NO CHANGE" and "inside +-5%" in v.arm_reasons[0]
    assert experiment_verdict([("k7", SAME)], [], [], [], VerdictRule(require_gain=False)).decision == "PROMOTE"
    # a declared level with no result (rejected cell) blocks PROMOTE and NO CHANGE
    v = experiment_verdict([("k7", GAIN)], [], [], ["c=8"])
    assert v.decision == "INCONCLUSIVE" and v.reasons == ["missing: no result at c=8 (rejected or not run)"]
    assert experiment_verdict([], [], [], []).decision == "INCONCLUSIVE"


def test_verdict_metrics_unknown_name_is_one_line_listing_the_known(tmp_path: Path) -> None:
    from tests.test_spec import base_doc, problems

    doc = base_doc()
    doc["verdict"] = {"metrics": ["decode_tok_s", "p99_ttft"]}
    (line,) = problems(tmp_path, doc)
    assert line.startswith("verdict.metrics: unknown metric(s) 'p99_ttft'; known metrics: decode_tok_s, ")
    assert "ttft" in line and "tpot" in line and "aggregate_tok_s" in line


# -------------------------------------------------------------------------------------- cost model


def test_cost_model_predicts_hand_computed_best_k() -> None:
    a, b = 0.020, 0.005
    tokens = {k: 1 + sum(DOMAIN_K7[:k]) for k in range(1, 8)}
    # two arms measured: k=5 and k=7; step time recovered from decode tok/s and acceptance length
    points = [(k, step_time_from(tokens[k] / (a + b * k), tokens[k])) for k in (5, 7)]
    model = fit_step_time(points)
    assert model.a == pytest.approx(a) and model.b == pytest.approx(b)
    pred = predict_k(DOMAIN_K7, points[1][1], k_measured=7, k_max=9, step_model=model)
    # by hand: k=4 4.26/.040=106.5, k=5 4.87/.045=108.2, k=6 5.36/.050=107.2, k=7 5.71/.055=103.8
    assert pred.best_k == 5
    assert pred.at(5).decode_tok_s == pytest.approx(4.87 / 0.045)
    assert pred.at(6).decode_tok_s == pytest.approx(5.36 / 0.050)
    assert pred.at(7).tokens_per_step == pytest.approx(5.71) and not pred.at(7).extrapolated
    # past k=7 the tail continues geometrically with the fitted ratio of the deepest positions
    assert pred.at(8).extrapolated and 0.7 < pred.tail_ratio < 0.85
    assert pred.at(8).tokens_per_step == pytest.approx(5.71 + 0.35 * pred.tail_ratio)
    # cross-arm check: what the k=7 arm predicts at k=5 vs the k=5 arm's measurement
    assert prediction_error(pred.at(5).decode_tok_s, tokens[5] / (a + b * 5)) == pytest.approx(0.0, abs=1e-9)
    assert prediction_error(110.0, 100.0) == pytest.approx(0.10)


def test_cost_model_without_step_slope_prefers_deepest_k() -> None:
    pred = predict_k(DOMAIN_K7, 0.03)
    assert [r.k for r in pred.rows] == list(range(1, 11))
    assert pred.best_k == 10  # constant step time: every accepted position is free
    assert fit_step_time([(5, 0.03), (5, 0.032)]).b == 0.0
    assert fit_step_time([(5, 0.04), (7, 0.03)]).b == 0.0  # a falling slope is noise
    one = predict_k([0.6], 0.02, k_max=3)
    assert one.tail_ratio == pytest.approx(0.6)  # i.i.d. fallback with a single position
    assert one.at(3).tokens_per_step == pytest.approx(1 + 0.6 + 0.36 + 0.216)
    with pytest.raises(ValueError):
        predict_k(DOMAIN_K7, 0.03, k_measured=5)
