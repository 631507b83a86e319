"""Rate cells beside concurrency cells after the benchmark: the verdict, DuckDB (migration 009,
round trip), the history series and the named queries.

Planted history: runs on vLLM 0.27.0 and 0.32.0, each arm with closed cells (c=1, c=4) and
open-loop cells at 2.5 req/s (Poisson) and, in one run, 2.5 req/s gamma b=0.5. The k3 rate cell
decodes 25 % faster on 0.32.0 (decode_s 1.0 -> 0.8); the closed cells do not change.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from specwatch.analysis.verdict import assess
from specwatch.records import ArmResult, CellKey, CellResult, RunResult
from specwatch.spec import ExperimentSpec
from specwatch.store import db, history
from specwatch.store import queries as q
from specwatch.store.ingest import ingest, load
from specwatch_testing import records as rf

NGRAM = {"method": "ngram", "prompt_lookup_max": 4}
RATE = CellKey(load="rate", rate=2.5, prompt_class="code", prompt_tokens=128)


def rate_cell(decode_s: float, arrival: str = "poisson", burstiness: float = 1.0) -> CellResult:
    closed = rf.cell(1, "code", decode_s, [80.0, 60.0, 40.0])
    requests = [s.model_copy(update={"started_s": 0.4 * i + 0.001, "scheduled_s": 0.4 * i})
                for i, s in enumerate(closed.requests)]
    return closed.model_copy(update={"load_mode": "rate", "concurrency": None, "request_rate": 2.5,
                                     "arrival": arrival, "burstiness": burstiness, "max_running_observed": None,
                                     "requests": requests})


def arm(name: str, k: int, closed_s: float, rate_s: float, version: str, day: int, round_no: int = 1,
        **rate: object) -> ArmResult:
    a = rf.arm(name, k, closed_s, [80.0, 60.0, 40.0])
    a.cells.append(rate_cell(rate_s, **rate))  # type: ignore[arg-type]
    a.round = round_no
    a.image = f"cpu-{version}"
    a.image_ref = a.image_ref.model_copy(update={"name": a.image, "vllm_version": version})  # type: ignore[union-attr]
    a.started_at = rf.T0 + timedelta(days=day, minutes=round_no)
    a.ended_at = a.started_at + timedelta(minutes=1)
    return a


def run(run_id: str, day: int, arms: list[ArmResult]) -> RunResult:
    r = rf.run(run_id=run_id, arms=arms)
    r.started_at = rf.T0 + timedelta(days=day)
    r.ended_at = r.started_at + timedelta(minutes=30)
    r.provenance.host.cpu_model = "Xeon A"
    return r


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("rate") / "h.duckdb"
    ingest(run("old", 1, [arm("k3", 3, 1.0, 1.0, "0.27.0", 1)]), path)
    ingest(run("new", 2, [arm("k3", 3, 1.0, 0.8, "0.32.0", 2)]), path)
    ingest(run("bursty", 3, [arm("k3", 3, 1.0, 0.5, "0.32.0", 3, arrival="gamma", burstiness=0.5)]), path)
    c = db.connect(path)
    yield c
    c.close()


def test_rate_cells_round_trip_through_duckdb(tmp_path: Path) -> None:
    result = run("rt", 1, [arm("k3", 3, 1.0, 1.0, "0.32.0", 1)])
    ingest(result, tmp_path / "rt.duckdb")
    con = db.connect(tmp_path / "rt.duckdb")
    back = load(con, "rt")
    con.close()
    cell = next(c for c in back.arms[0].cells if c.load_mode == "rate")
    assert cell.key == RATE and cell.concurrency is None
    assert (cell.arrival, cell.burstiness) == ("poisson", 1.0)
    assert [r.scheduled_s for r in cell.requests] == pytest.approx([0.0, 0.4, 0.8, 1.2])
    assert cell.achieved_rate == pytest.approx(2.5)
    assert [r.send_lateness_s for r in cell.requests] == pytest.approx([0.001] * 4)


def test_a_rate_cell_is_a_series_of_its_own_and_closed_keys_did_not_move(con) -> None:  # type: ignore[no-untyped-def]
    cells = con.execute("SELECT DISTINCT series_key, load_mode, load_level, arrival, burstiness, concurrency "
                        "FROM series_cells WHERE prompt_class = 'code'").df()
    rate = cells[cells.load_mode == "rate"]
    assert sorted(zip(rate.load_level, rate.arrival, rate.burstiness, strict=True)) == [
        ("r2.5", "gamma", 0.5), ("r2.5", "poisson", 1.0)]
    assert len(set(cells.series_key)) == len(cells) == 4  # c=1, c=4, r2.5 poisson, r2.5 gamma
    # closed-loop series keep the key migration 003 gave them (history stays joined across the upgrade)
    old_formula = con.execute("""
        SELECT DISTINCT md5(CAST(to_json([model, checkpoint_config_sha256, method, CAST(k AS VARCHAR), prompt_class,
            CAST(prompt_tokens AS VARCHAR), CAST(max_tokens AS VARCHAR), CAST(concurrency AS VARCHAR), sampling,
            cpu_model, gpu_model, CAST(gpu_count AS VARCHAR), CAST(tensor_parallel_size AS VARCHAR)]) AS VARCHAR))
        FROM series_cells WHERE load_mode = 'closed' AND prompt_class = 'code'""").fetchall()
    assert {k for (k,) in old_formula} == set(cells[cells.load_mode == "closed"].series_key)


def test_image_vs_image_compares_rate_cells_beside_closed_cells(con) -> None:  # type: ignore[no-untyped-def]
    frame = q.run_named(con, "image-vs-image", {"image_a": "0.27.0", "image_b": "0.32.0"})
    code = frame[frame.prompt_class == "code"]
    rate = code[code.load_mode == "rate"]
    assert list(rate.load_level) == ["r2.5"] and list(rate.arrival) == ["poisson"]  # gamma ran on one version only
    assert rate.iloc[0].decode_delta_pct == pytest.approx(25.0)
    closed = code[code.load_mode == "closed"]
    assert sorted(closed.concurrency) == [1, 4] and (closed.decode_delta_pct == 0).all()


def test_series_and_trend_queries_name_and_filter_the_load(con) -> None:  # type: ignore[no-untyped-def]
    series = q.run_named(con, "series", {"load_level": "r2.5"})
    assert set(series.load_level) == {"r2.5"} and len(series) == 2  # code at two arrival laws
    trend = q.run_named(con, "acceptance-trend", {"load_level": "r2.5", "prompt_class": "code"})
    poisson = trend[trend.arrival == "poisson"]
    assert list(poisson.decode_tok_s) == pytest.approx([32.0, 40.0])
    assert list(poisson.decode_change_pct)[1] == pytest.approx(25.0)


def test_history_labels_rate_series(con) -> None:  # type: ignore[no-untyped-def]
    labels = [s.label for s in history.summarize(history.points(con))]
    assert sum("r=2.5/s code" in label for label in labels) == 2
    assert sum(" c=4 code" in label for label in labels) == 1


def spec(**verdict: object) -> ExperimentSpec:
    return ExperimentSpec.model_validate({
        "name": "synthetic", "model": {"generate": {}}, "images": [{"name": "cpu", "version": "0.32.0"}],
        "arms": [{"name": "k3", "image": "cpu", "speculative": {**NGRAM, "k": 3}},
                 {"name": "k5", "image": "cpu", "speculative": {**NGRAM, "k": 5}}],
        "baseline": "k3", "design": {"rounds": 3},
        "workload": {"prompt_classes": ["code", "prose"], "concurrency": [1, 4], "request_rates": [2.5]},
        "verdict": verdict,
    })


def rounds(rate_speedup: float) -> RunResult:
    """Three rounds per arm; k5 is 10 % faster in closed cells and `rate_speedup` in the rate cell."""
    arms = []
    for round_no in (1, 2, 3):
        jitter = 1 + 0.002 * round_no
        arms += [arm("k3", 3, jitter, jitter, "0.32.0", 1, round_no),
                 arm("k5", 5, jitter / 1.1, jitter / rate_speedup, "0.32.0", 1, round_no)]
    result = run("v", 1, arms)
    result.experiment = spec().model_dump(mode="json")
    return result


def test_the_verdict_judges_rate_cells_beside_concurrency_cells() -> None:
    assert assess(rounds(1.1), spec()).verdict.decision == "PROMOTE"
    v = assess(rounds(0.8), spec()).verdict  # slower under open-loop load only
    assert v.decision == "REVERT" and any("r=2.5/s code" in r for r in v.arm_reasons)
    # declared concurrency levels only: the rate cell is not counted, and its row says so
    result, closed_only = rounds(0.8), spec(request_rates=[])
    a = assess(result, closed_only)
    assert a.verdict.decision == "PROMOTE"
    from specwatch.report.rows import verdict_rows

    rows = verdict_rows(result, closed_only, a)
    assert {r.verdict for r in rows if r.arm == "k5" and r.key.load == "rate"} == {"not judged"}


def test_the_verdict_metrics_come_from_the_spec() -> None:
    result = rounds(1.1)
    for a in result.arms:  # k5 faster to decode but 30 % slower to the first token
        if a.name == "k5":
            for c in a.cells:
                c.requests = [r.model_copy(update={"ttft_s": 0.065}) for r in c.requests]
    assert assess(result, spec()).verdict.decision == "PROMOTE"  # decode_tok_s only
    assessment = assess(result, spec(metrics=["decode_tok_s", "ttft"]))
    assert assessment.verdict.decision == "REVERT"
    assert {c.metric for c in assessment.cells} == {"decode_tok_s", "ttft"}
    assert all(c.outcome == "regression" for c in assessment.cells if c.metric == "ttft")


def _report(result: RunResult, s: ExperimentSpec) -> str:
    from specwatch.report.markdown import render_markdown
    from specwatch.report.rows import verdict_rows

    assessment = assess(result, s)
    return render_markdown(result, s, assessment, verdict_rows(result, s, assessment), [])


def test_the_report_shows_rate_cells_and_one_row_per_judged_metric() -> None:
    result = rounds(1.1)
    s = spec(metrics=["decode_tok_s", "ttft"])
    text = _report(result, s)
    assert "| k5 | 5 | r=2.5/s | code | 3 |" in text and "| k5 | 5 | c=4 | prose | 3 |" in text
    rows = [line for line in text.splitlines() if line.startswith("| k5 | r=2.5/s | code |")]
    assert [line.split(" | ")[3:5] for line in rows] == [["decode_tok_s", "higher"], ["ttft", "lower"]]
    assert "request rates [2.5] req/s; poisson arrivals (burstiness 1)" in text
    # the default (decode tok/s alone) keeps the report as it was: no per-metric table
    assert "Per metric" not in _report(result, spec())


def test_quality_checks_name_rate_cells_by_their_id(tmp_path: Path) -> None:
    from specwatch.spec import Thresholds
    from specwatch.store.checks import history_records, run_checks

    path = tmp_path / "q.duckdb"
    ingest(run("a", 1, [arm("k3", 3, 1.0, 1.0, "0.27.0", 1), arm("k5", 5, 1.0, 2.0, "0.27.0", 1)]), path)
    ingest(run("b", 2, [arm("k3", 3, 1.0, 2.0, "0.32.0", 2)]), path)  # the rate cell halves its decode rate
    con = db.connect(path)
    try:
        records = run_checks(con, "a", "k3", Thresholds())
        history, notes = history_records(con, "b", Thresholds())
    finally:
        con.close()
    rate_checks = [r for r in records if r.cell == RATE.id]
    assert rate_checks and all(r.concurrency is None for r in rate_checks)
    assert any(not r.passed and r.arm == "k5" and r.severity == "regression" for r in rate_checks)
    failed = [r for r in history if not r.passed]
    assert {r.cell for r in failed} == {RATE.id} and notes == []
    assert any(r.metric.startswith("acceptance_pos_") for r in history if r.cell == RATE.id)  # positions joined


def test_a_capped_rate_cell_is_a_series_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "cap.duckdb"
    capped = arm("k3", 3, 1.0, 1.0, "0.32.0", 2)
    capped.cells[-1] = capped.cells[-1].model_copy(update={"max_concurrency": 16})
    ingest(run("free", 1, [arm("k3", 3, 1.0, 1.0, "0.32.0", 1)]), path)
    ingest(run("capped", 2, [capped]), path)
    con = db.connect(path)
    try:
        keys = con.execute("SELECT run_id, series_key FROM series_cells WHERE load_mode = 'rate'").fetchall()
        closed = con.execute("SELECT count(DISTINCT series_key) FROM series_cells WHERE load_mode = 'closed'")
        assert closed.fetchone() == (4,)  # both runs' closed cells share their series
    finally:
        con.close()
    assert len({k for _, k in keys}) == 2
