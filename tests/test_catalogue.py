"""A metric added to the catalogue alone (specwatch/analysis/metrics.py) flows through ingest, the in-run
and history delta checks, the verdict, the report's columns and the history series: no migration, no SQL,
no report edit."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from statistics import median

import pytest

from specwatch.analysis import metrics
from specwatch.analysis.metrics import DeltaCheck, Metric, ReportColumn
from specwatch.analysis.verdict import assess
from specwatch.records import ArmResult, CellResult, RunResult
from specwatch.report.markdown import render_markdown
from specwatch.report.rows import verdict_rows
from specwatch.resolve import stored_spec
from specwatch.spec import Thresholds
from specwatch.store import db
from specwatch.store.checks import history_records, run_checks
from specwatch.store.db import connect
from specwatch.store.history import points, summarize
from specwatch.store.ingest import frames, ingest
from specwatch_testing import records as rf
from specwatch_testing.experiments import endpoint_ab


def _prefill_tok_s(cell: CellResult) -> float | None:
    rates = [r.prompt_tokens / r.ttft_s for r in cell.requests if r.status == "ok" and r.ttft_s]
    return median(rates) if rates else None


# derived from raw data every cell already stores: prompt tokens over TTFT
PREFILL = Metric("prefill_tok_s", "prefill_tok_s_median", True, "tok/s", "prefill tok/s", ".1f",
                 _prefill_tok_s, judged=True, check=DeltaCheck("prefill"),
                 report=ReportColumn("prefill tok/s", ".0f"), trend="prefill")


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "CATALOGUE", (*metrics.CATALOGUE, PREFILL))
    monkeypatch.setitem(metrics.METRICS, PREFILL.name, PREFILL)


def _slower_prefill(arm: ArmResult) -> ArmResult:
    """Every request's TTFT doubled (50 -> 100 ms, still within the SLO): prefill tok/s halves."""
    cells = [c.model_copy(update={"requests": [r.model_copy(update={"ttft_s": 0.1}) for r in c.requests]})
             for c in arm.cells]
    return arm.model_copy(update={"cells": cells})


def _ab(run_id: str = "20261130T120000Z-abcdef") -> RunResult:
    base, cand = rf.arm("base", 3, 1.0, [80.0, 60.0, 40.0]), rf.arm("cand", 3, 1.0, [80.0, 60.0, 40.0])
    return rf.run(run_id, [base, _slower_prefill(cand)])


@pytest.mark.usefixtures("registered")
def test_ingest_stores_the_new_metric_and_the_run_check_judges_it(tmp_path: Path) -> None:
    result = _ab()
    ingest(result, tmp_path / "c.duckdb")
    con = connect(tmp_path / "c.duckdb")
    try:
        stored = con.execute("SELECT arm, value FROM cell_metrics WHERE metric = 'prefill_tok_s_median'").fetchall()
        records = run_checks(con, result.run_id, "base", Thresholds())
    finally:
        con.close()
    assert sorted(stored) == [("base", 2560.0)] * 4 + [("cand", 1280.0)] * 4  # 128 tokens / 50 ms, / 100 ms
    bad = [r for r in records if not r.passed]
    assert {(r.check, r.metric, r.arm) for r in bad} == {("regression.prefill", "prefill_tok_s_median", "cand")}
    assert len(bad) == 4
    assert bad[0].detail == "prefill tok/s 1280.0 vs baseline 2560.0 (-50.0%, band 5%)"


@pytest.mark.usefixtures("registered")
def test_the_history_check_judges_it_against_the_previous_run(tmp_path: Path) -> None:
    db = tmp_path / "h.duckdb"
    first = rf.run("20261130T120000Z-aaaaaa", [rf.arm("k3", 3, 1.0, [80.0, 60.0, 40.0])])
    second = rf.run("20261201T120000Z-bbbbbb", [_slower_prefill(rf.arm("k3", 3, 1.0, [80.0, 60.0, 40.0]))])
    second = second.model_copy(update={"started_at": first.started_at + timedelta(days=1)})
    ingest(first, db)
    ingest(second, db)
    con = connect(db)
    try:
        records, notes = history_records(con, second.run_id, Thresholds(), "same-image")
        series = summarize(points(con))
    finally:
        con.close()
    prefill = [r for r in records if r.check == "history.prefill"]
    assert not notes and len(prefill) == 4 and not any(r.passed for r in prefill)
    assert {(r.value, r.baseline_value) for r in prefill} == {(1280.0, 2560.0)}
    # `specwatch history` follows it along each series too
    assert len(series) == 4 and {t.latest for s in series for t in s.trends if t.metric is PREFILL} == {1280.0}


@pytest.mark.usefixtures("registered")
def test_the_verdict_judges_it_and_the_report_shows_its_column() -> None:
    exp = endpoint_ab("demo", "http://127.0.0.1:1", "http://127.0.0.1:2", {"rounds": 1},
                      {"prompt_classes": ["code", "prose"], "concurrency": [1, 4], "prompt_tokens": 128})
    exp["verdict"] = {"metrics": ["decode_tok_s", "prefill_tok_s"]}
    result = _ab().model_copy(update={"experiment": exp})
    spec = stored_spec(exp)
    assessment = assess(result, spec)
    judged = [c for c in assessment.cells if c.metric == "prefill_tok_s"]
    assert len(judged) == 4 and all(c.ci is not None and c.ci.estimate == pytest.approx(-0.5) for c in judged)
    text = render_markdown(result, spec, assessment, verdict_rows(result, spec, assessment), [])
    assert "| KV peak | prefill tok/s | preemptions |" in text  # after the catalogue's earlier columns
    row = next(line for line in text.splitlines() if line.startswith("| cand | closed/c4/code/p128 |"))
    assert "| 1280 |" in row
    assert "| cand | c=4 | code | prefill_tok_s | higher | 2560.000 tok/s | 1280.000 tok/s |" in text


@pytest.mark.usefixtures("registered")
def test_an_unregistered_metric_is_still_refused() -> None:
    assert metrics.unknown_metrics(["prefill_tok_s"]) is None
    problem = metrics.unknown_metrics(["nope"])
    assert problem is not None and problem.startswith("unknown metric(s) 'nope'; known metrics: decode_tok_s, ")


def test_migration_014_moves_the_stored_runs_metrics_into_cell_metrics(tmp_path: Path) -> None:
    """A database at schema 013 gets the rows ingest would have written, from the cells' columns."""
    result = _ab()
    con = rf.database_at(tmp_path / "old.duckdb", 13)
    # the tables and columns a database at 013 has (later migrations add more); launches were numbered by
    # `block` until migration 018
    rf.append_as_stored(con, {t: f.rename(columns={"round": "block"}) for t, f in frames(result).items()
                              if t != "cell_metrics"})
    assert db.migrate(con)[0] == "014_cell_metrics.sql"
    moved = con.execute("SELECT arm, round, cell, metric, value FROM cell_metrics").fetchall()
    con.close()
    written = frames(result)["cell_metrics"][["arm", "round", "cell", "metric", "value"]]
    assert sorted(moved) == sorted(written.itertuples(index=False, name=None))
    assert len(moved) > 8 * 10  # every cell, its figures present under 100 requests


def test_a_batched_cell_judges_the_catalogues_stand_in() -> None:
    """From BATCHED_CONCURRENCY a closed cell's decode tok/s is judged as aggregate tok/s, the catalogue's
    `batched` stand-in; below it, in open-loop cells (no concurrency) and for metrics without one, as named."""
    decode, ttft = metrics.METRICS["decode_tok_s"], metrics.METRICS["ttft"]
    c = metrics.BATCHED_CONCURRENCY
    assert metrics.judged_at(decode, c).name == metrics.judged_at(decode, 4 * c).name == "aggregate_tok_s"
    assert metrics.judged_at(decode, c - 1) is decode and metrics.judged_at(decode, None) is decode
    assert metrics.judged_at(ttft, 4 * c) is ttft
    assert all(m.batched in metrics.METRICS for m in metrics.CATALOGUE if m.batched)  # each stand-in is judgeable
