"""Quality checks against a real DuckDB file with planted rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from specwatch.records import CellKey, QualityRecord
from specwatch.spec import Thresholds
from specwatch.store.checks import SANITY_BOUNDS, run_checks
from specwatch.store.db import connect
from tasks.quality import check_quality

RUN = "run-1"
TH = Thresholds(noise_band=0.05, max_prefix_cache_hit_rate=0.01)
CELLS = [(c, p) for c in (1, 4) for p in ("code", "prose")]
K3 = [0.8, 0.65, 0.5]
SANITY_PER_CELL = len(SANITY_BOUNDS)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "specwatch.duckdb"


@pytest.fixture
def con(db_path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    c = connect(db_path)
    c.execute(
        "INSERT INTO runs (run_id, experiment_name, started_at) VALUES ($r, 'quality-test', now())",
        {"r": RUN},
    )
    yield c
    c.close()


def add_arm(con: duckdb.DuckDBPyConnection, arm: str, k: int | None, round_no: int = 1) -> None:
    con.execute(
        "INSERT INTO arms (run_id, arm, round, image, method, k, status) VALUES ($r, $a, $b, 'img', $m, $k, 'ok')",
        {"r": RUN, "a": arm, "b": round_no, "m": "ngram" if k else None, "k": k},
    )


def cell_id(concurrency: int, prompt_class: str) -> str:
    return CellKey(concurrency=concurrency, prompt_class=prompt_class, prompt_tokens=128).id


def add_cell(
    con: duckdb.DuckDBPyConnection,
    arm: str,
    concurrency: int,
    prompt_class: str,
    *,
    decode: float = 45.0,
    positions: list[float] | None = None,
    failed: int = 0,
    prefix: float | None = 0.0,
    rejected: bool = False,
    draft_rate: float | None = None,
    round_no: int = 1,
) -> None:
    """A cell whose acceptance figures follow from `positions` as vLLM defines them."""
    mal = 1 + sum(positions) if positions else None
    rate = draft_rate if draft_rate is not None else (sum(positions) / len(positions) if positions else None)
    con.execute(
        """
        INSERT INTO cells (run_id, arm, round, cell, load_mode, concurrency, prompt_class, prompt_tokens,
                           requests_ok, requests_failed, decode_tok_s_median, mean_acceptance_length,
                           draft_acceptance_rate, prefix_cache_hit_rate, rejected, reject_reason)
        VALUES ($r, $a, $b, $cell, 'closed', $c, $p, 128, 8, $f, $d, $mal, $rate, $prefix, $rej, $why)
        """,
        {
            "r": RUN, "a": arm, "b": round_no, "cell": cell_id(concurrency, prompt_class), "c": concurrency,
            "p": prompt_class, "f": failed, "d": decode,
            "mal": mal, "rate": rate, "prefix": prefix, "rej": rejected, "why": "planted" if rejected else None,
        },
    )
    for metric, value in (("decode_tok_s_median", decode), ("mean_acceptance_length", mal)):
        if value is not None:
            set_metric(con, metric, value, arm, cell_id(concurrency, prompt_class), round_no)
    for i, acc in enumerate(positions or []):
        con.execute(
            """
            INSERT INTO spec_positions (run_id, arm, round, cell, position, accepted, acceptance)
            VALUES ($r, $a, $b, $cell, $i, $acc * 100, $acc)
            """,
            {"r": RUN, "a": arm, "b": round_no, "cell": cell_id(concurrency, prompt_class), "i": i, "acc": acc},
        )


def set_metric(con: duckdb.DuckDBPyConnection, metric: str, value: float, arm: str | None = None,
               cell: str | None = None, round_no: int | None = None) -> None:
    """A catalogue metric's value in the planted cells (all, or those of `arm`, `cell`, `round`), where
    ingest stores it."""
    match = "($a IS NULL OR arm = $a) AND ($c IS NULL OR cell = $c) AND ($b IS NULL OR round = $b)"
    where = {"m": metric, "a": arm, "c": cell, "b": round_no}
    con.execute(f"DELETE FROM cell_metrics WHERE metric = $m AND {match}", where)
    con.execute(f"INSERT INTO cell_metrics SELECT run_id, arm, round, cell, $m, $v FROM cells WHERE {match}",
                {**where, "v": value})


Overrides = dict[tuple[int, str], dict[str, Any]]


def add_grid(
    con: duckdb.DuckDBPyConnection, arm: str, k: int | None, positions: list[float] | None,
    over: Overrides | None = None,
) -> None:
    """Arm with a 2x2 grid of cells; `over[(concurrency, prompt_class)]` overrides one cell's fields."""
    add_arm(con, arm, k)
    for c, p in CELLS:
        kw = {"decode": 45.0, "positions": positions} | (over or {}).get((c, p), {})
        add_cell(con, arm, c, p, **kw)


def failures(records: list[QualityRecord]) -> list[QualityRecord]:
    return [r for r in records if not r.passed]


def by_check(records: list[QualityRecord], check: str) -> list[QualityRecord]:
    return [r for r in records if r.check == check]


def test_clean_run_records_every_check_and_all_pass(con: duckdb.DuckDBPyConnection) -> None:
    add_grid(con, "base", 3, K3)
    add_grid(con, "cand", 3, [0.79, 0.66, 0.49], {(1, "code"): {"decode": 44.0}, (4, "prose"): {"decode": 46.5}})

    records = run_checks(con, RUN, "base", TH)

    sanity = [r for r in records if r.severity == "invalid"]
    regression = [r for r in records if r.severity == "regression"]
    assert len(sanity) == 8 * SANITY_PER_CELL == 48
    # per matched cell: decode + mean acceptance length + 3 positions
    assert len(regression) == 4 * (1 + 1 + 3) == 20
    assert failures(records) == []
    assert {r.arm for r in regression} == {"cand"}
    assert {r.metric for r in regression} == {
        "decode_tok_s_median", "mean_acceptance_length", "acceptance_pos_0", "acceptance_pos_1", "acceptance_pos_2",
    }
    assert all(r.value is not None and r.baseline_value is not None and r.threshold == 0.05 for r in regression)


def test_decode_regression_flagged_with_cell_and_delta(con: duckdb.DuckDBPyConnection) -> None:
    add_grid(con, "base", 3, K3)
    add_grid(con, "cand", 3, K3, {(4, "code"): {"decode": 36.0}})

    bad = failures(run_checks(con, RUN, "base", TH))

    assert len(bad) == 1
    r = bad[0]
    assert (r.arm, r.round, r.concurrency, r.prompt_class) == ("cand", 1, 4, "code")
    assert (r.check, r.metric, r.severity) == ("regression.decode_tok_s", "decode_tok_s_median", "regression")
    assert r.value == 36.0 and r.baseline_value == 45.0 and r.threshold == 0.05
    assert r.value / r.baseline_value - 1 == pytest.approx(-0.20)
    assert r.detail == "decode tok/s 36.0 vs baseline 45.0 (-20.0%, band 5%)"


def test_band_is_a_runtime_parameter(con: duckdb.DuckDBPyConnection) -> None:
    add_grid(con, "base", 3, K3)
    add_grid(con, "cand", 3, K3, {(4, "code"): {"decode": 36.0}})

    wide = Thresholds(noise_band=0.25, max_prefix_cache_hit_rate=0.01)

    assert failures(run_checks(con, RUN, "base", wide)) == []
    assert len(failures(run_checks(con, RUN, "base", TH))) == 1


def test_acceptance_regression_only_between_same_k(con: duckdb.DuckDBPyConnection) -> None:
    add_grid(con, "base", 3, K3)
    # same k: position 2 drops 0.5 -> 0.4 (-20%) in one cell; the length moves only -3.4%
    add_grid(con, "same_k", 3, K3, {(1, "prose"): {"positions": [0.8, 0.65, 0.4]}})
    # different k: far lower acceptance everywhere, but incomparable with k=3
    add_grid(con, "k5", 5, [0.6, 0.45, 0.3, 0.2, 0.1])
    add_grid(con, "nospec", None, None)

    records = run_checks(con, RUN, "base", TH)
    bad = failures(records)

    assert len(bad) == 1
    r = bad[0]
    assert (r.arm, r.concurrency, r.prompt_class) == ("same_k", 1, "prose")
    assert (r.check, r.metric) == ("regression.acceptance_position", "acceptance_pos_2")
    assert (r.value, r.baseline_value) == (0.4, 0.5)
    assert r.detail == "acceptance at position 2 0.400 vs baseline 0.500 (-20.0%, band 5%)"
    for other in ("k5", "nospec"):
        compared = {x.metric for x in records if x.arm == other and x.severity == "regression"}
        assert compared == {"decode_tok_s_median"}, other
    same_k_length = [x for x in records if x.arm == "same_k" and x.metric == "mean_acceptance_length"]
    assert len(same_k_length) == 4 and all(x.passed for x in same_k_length)
    # no speculation: acceptance figures are null, which sanity allows
    nospec_rate = [x for x in records if x.arm == "nospec" and x.metric == "draft_acceptance_rate"]
    assert len(nospec_rate) == 4 and all(x.passed and x.value is None for x in nospec_rate)


def test_sanity_violations_flagged_invalid(con: duckdb.DuckDBPyConnection) -> None:
    add_grid(
        con,
        "base",
        3,
        K3,
        {
            (1, "code"): {"positions": [0.5, 0.6, 0.4]},
            (1, "prose"): {"failed": 2},
            (4, "code"): {"prefix": 0.05},
            (4, "prose"): {"draft_rate": 1.2},
        },
    )

    records = run_checks(con, RUN, "base", TH)
    bad = failures(records)

    got = {(r.concurrency, r.prompt_class, r.check, r.metric) for r in bad}
    assert got == {
        (1, "code", "sanity.positions_non_increasing", "acceptance_pos_max_rise"),
        (1, "prose", "sanity.no_failed_requests", "requests_failed"),
        (4, "code", "sanity.prefix_cache", "prefix_cache_hit_rate"),
        (4, "prose", "sanity.acceptance_range", "draft_acceptance_rate"),
    }
    assert all(r.severity == "invalid" and r.arm == "base" for r in bad)
    rise = next(r for r in bad if r.check == "sanity.positions_non_increasing")
    assert rise.value == pytest.approx(0.1) and "at position 1" in rise.detail
    prefix = next(r for r in bad if r.check == "sanity.prefix_cache")
    assert prefix.value == 0.05 and prefix.threshold == 0.01
    assert next(r for r in bad if r.check == "sanity.no_failed_requests").value == 2.0
    assert len(records) == 4 * SANITY_PER_CELL  # one arm only: no regression records


def test_prefix_limit_is_strict_and_out_of_range_positions_fail(con: duckdb.DuckDBPyConnection) -> None:
    add_grid(con, "base", 3, K3, {(1, "code"): {"prefix": 0.01}, (4, "code"): {"positions": [1.1, 1.0, 0.9]}})

    got = {(r.concurrency, r.prompt_class, r.metric) for r in failures(run_checks(con, RUN, "base", TH))}

    assert got == {(1, "code", "prefix_cache_hit_rate"), (4, "code", "acceptance_pos_max")}


def test_rejected_cells_sanity_checked_but_not_compared(con: duckdb.DuckDBPyConnection) -> None:
    add_grid(con, "base", 3, K3, {(4, "prose"): {"rejected": True, "decode": 90.0}})
    # a rejected candidate cell with a huge "regression" and an impossible counter
    add_grid(con, "cand", 3, K3, {(1, "code"): {"rejected": True, "decode": 10.0, "failed": 3}})

    records = run_checks(con, RUN, "base", TH)

    regressed_cells = {(r.concurrency, r.prompt_class) for r in records if r.severity == "regression"}
    assert regressed_cells == {(1, "prose"), (4, "code")}
    assert all(r.passed for r in records if r.severity == "regression")
    rejected_sanity = [r for r in records if r.arm == "cand" and (r.concurrency, r.prompt_class) == (1, "code")]
    assert len(rejected_sanity) == SANITY_PER_CELL
    bad = failures(rejected_sanity)
    assert [(r.check, r.severity) for r in bad] == [("sanity.no_failed_requests", "invalid")]
    assert bad[0].detail.endswith("[rejected cell]")


def test_no_comparable_arms_gives_sanity_only_and_unknown_run_gives_nothing(con: duckdb.DuckDBPyConnection) -> None:
    add_grid(con, "base", 3, K3)

    records = run_checks(con, RUN, "base", TH)

    assert len(records) == 4 * SANITY_PER_CELL
    assert all(r.severity == "invalid" and r.passed for r in records)
    assert run_checks(con, "no-such-run", "base", TH) == []


def test_prefect_task_opens_the_file(con: duckdb.DuckDBPyConnection, db_path: Path) -> None:
    add_grid(con, "base", 3, K3)
    add_grid(con, "cand", 3, K3, {(1, "code"): {"decode": 30.0}})
    con.close()

    records = check_quality.fn(db_path, RUN, "base", TH)

    assert len(records) == 8 * SANITY_PER_CELL + 4 * 5
    assert [(r.arm, r.concurrency, r.prompt_class, r.metric) for r in failures(records)] == [
        ("cand", 1, "code", "decode_tok_s_median")
    ]


def test_goodput_and_p99_regressions_are_flagged_with_their_direction(con: duckdb.DuckDBPyConnection) -> None:
    add_grid(con, "base", 3, K3)
    add_grid(con, "cand", 3, K3)
    for metric, value in (("goodput_share", 0.9), ("goodput_tok_s", 40.0), ("ttft_ms_p99", 200.0),
                          ("tpot_ms_p99", 25.0)):
        set_metric(con, metric, value)
    # cand c=4 code: goodput share falls 0.9 -> 0.6, TTFT p99 rises 200 -> 300 ms (both worse by a third);
    # cand c=1 code: TPOT p99 falls 25 -> 20 ms (better: lower latency is no regression)
    set_metric(con, "goodput_share", 0.6, "cand", cell_id(4, "code"))
    set_metric(con, "ttft_ms_p99", 300.0, "cand", cell_id(4, "code"))
    set_metric(con, "tpot_ms_p99", 20.0, "cand", cell_id(1, "code"))

    records = run_checks(con, RUN, "base", TH)

    bad = sorted(failures(records), key=lambda r: r.metric)
    assert [(r.check, r.metric, r.cell) for r in bad] == [
        ("regression.goodput", "goodput_share", cell_id(4, "code")),
        ("regression.latency_p99", "ttft_ms_p99", cell_id(4, "code")),
    ]
    assert bad[0].detail == "goodput share 0.600 vs baseline 0.900 (-33.3%, band 5%)"
    assert bad[1].detail == "TTFT p99 ms 300.0 vs baseline 200.0 (-33.3%, band 5%)"
    # every cell pair is judged on all four set figures; the unset ones (ITL/E2E p99) are not compared
    latency = [r for r in records if r.check in ("regression.goodput", "regression.latency_p99")]
    assert len(latency) == 4 * 4 and not any(r.metric in ("itl_ms_p99", "e2e_ms_p99") for r in latency)
