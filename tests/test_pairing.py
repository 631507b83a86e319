"""The rounds as the sequential decision's input (specwatch.analysis.pairing): requests paired by index,
the cell figure where they do not pair, aggregate throughput for batched cells, + is better."""

from __future__ import annotations

import math

import pytest

from specwatch.analysis.metrics import BATCHED_CONCURRENCY, METRICS
from specwatch.analysis.pairing import compare, round_value
from specwatch.analysis.sequential import COMPOSITE, PriorVariance
from specwatch.records import CellResult
from specwatch_testing import records as rf


def cell(decode_s: list[float], concurrency: int = 1, ttft_s: float = 0.05) -> CellResult:
    """A cell whose request i decodes in decode_s[i] seconds (33 tokens)."""
    c = rf.cell(concurrency, "code", 1.0, [0.8, 0.6], requests=len(decode_s))
    c.requests = [r.model_copy(update={"decode_s": d, "ttft_s": ttft_s}) for r, d in zip(c.requests, decode_s,
                                                                                        strict=True)]
    return c


DECODE = METRICS["decode_tok_s"]


def test_requests_pair_by_index_and_the_round_value_is_their_median_log_ratio() -> None:
    base = cell([1.0, 2.0, 4.0])  # the prompts differ in difficulty; each is 20% faster in the candidate
    cand = cell([1.0 / 1.2, 2.0 / 1.2, 4.0 / 1.2])
    value, paired = round_value(base, cand, DECODE)
    assert paired and value == pytest.approx(math.log(1.2))


def test_lower_is_better_metrics_are_normalised_so_plus_is_better() -> None:
    value, paired = round_value(cell([1.0] * 3, ttft_s=0.10), cell([1.0] * 3, ttft_s=0.05), METRICS["ttft"])
    assert paired and value == pytest.approx(math.log(2.0))


def test_requests_that_do_not_pair_fall_back_to_the_cell_figure() -> None:
    base, cand = cell([1.0, 2.0, 4.0]), cell([1.0, 2.0, 4.0, 8.0])  # the candidate completed one more
    value, paired = round_value(base, cand, DECODE)
    assert not paired
    assert value == pytest.approx(math.log(cand.decode_tok_s_median / base.decode_tok_s_median))  # type: ignore[operator]
    failed = cell([1.0, 2.0, 4.0])
    failed.requests[1] = failed.requests[1].model_copy(update={"status": "error"})
    assert not round_value(base, failed, DECODE)[1]  # a request only one arm completed: no pairing
    assert not round_value(base, cand, METRICS["goodput_share"])[1]  # no per-request figure


def test_a_batched_cell_is_judged_on_aggregate_throughput() -> None:
    base = cell([1.0] * 4, concurrency=BATCHED_CONCURRENCY)
    cand = cell([1.0] * 4, concurrency=BATCHED_CONCURRENCY)
    cand.wall_s = base.wall_s / 1.25  # the same work in less wall time; per-request rates unchanged
    value, paired = round_value(base, cand, METRICS["aggregate_tok_s"])
    assert not paired and value == pytest.approx(math.log(1.25))
    assert round_value(base, cand, DECODE) == (0.0, False)  # the decode metric alone would miss it


def test_a_rejected_or_missing_cell_gives_nan() -> None:
    rejected = cell([1.0]).model_copy(update={"rejected": True})
    assert math.isnan(round_value(cell([1.0]), rejected, DECODE)[0])
    assert math.isnan(round_value(None, cell([1.0]), DECODE)[0])


def test_compare_gives_one_series_per_cell_and_metric_with_its_prior() -> None:
    arms = []
    for round_no in (1, 2):
        arms += [rf.arm("k3", 3, 1.0, [0.8, 0.6, 0.4]).model_copy(update={"round": round_no}),
                 rf.arm("k5", 5, 1.0 / 1.1, [0.8, 0.6, 0.4, 0.3, 0.2]).model_copy(update={"round": round_no})]
    arms[-1] = arms[-1].model_copy(update={"status": "failed", "cells": []})  # k5's second launch failed
    result = rf.run(arms=arms)
    key = next(c.key for c in arms[0].cells if c.key.level == "c=1" and c.prompt_class == "code")
    prior = PriorVariance(0.05, 10, "A/A")
    comp = compare(result, "k3", "k5", ["decode_tok_s", "ttft"], ["c=1"], {(key.id, "decode_tok_s"): prior,
                                                                         (COMPOSITE, "decode_tok_s"): prior})
    assert [(s.cell, s.metric) for s in comp.series] == [("c=1 code", "decode_tok_s"), ("c=1 prose", "decode_tok_s"),
                                                         ("c=1 code", "ttft"), ("c=1 prose", "ttft")]
    first = comp.series[0]
    assert first.prior == prior and comp.series[1].prior is None
    assert first.values[0] == pytest.approx(math.log(1.1)) and math.isnan(first.values[1])
    assert comp.keys["c=1 code"] == key
    assert (comp.paired, comp.valued) == (4, 4)
