"""The context-length sweep: the loop detector on planted texts, the bad-input lines, calibration to
the exact depth, and the flow end to end against fake servers (real vLLM: tests/test_real_endpoint.py)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from specwatch.analysis.loops import is_loop, repeated_phrase
from specwatch.bench.client import BenchTarget, Client
from specwatch.bench.prompts import SOURCES, PromptRequest, generated_text, repetition_ratio
from specwatch.resolve import load_spec
from specwatch.spec import SamplingSpec, SpecError, WorkloadSpec
from specwatch_testing.experiments import endpoint_ab
from specwatch_testing.records import query as rows
from specwatch_testing.server import run_fake_vllm

SPEC = json.dumps({"method": "ngram", "num_speculative_tokens": 3})
SWEEP_COLUMNS = ["run_id", "arm", "depth", "prompt_tokens", "ttft_s", "prefill_tok_s", "decode_tok_s",
                 "mean_acceptance_length", "acceptance_per_position", "repetition_ratio", "loop_detected"]


# ---------------------------------------------------------------- loop detector

LOOPING = [
    "the cat sat on the mat and the cat sat on the mat and the cat sat on the mat again",
    "I think that I think that I think that I think that",
    "ok " * 40,
    "Result: value is 4. Result: value is 4. Result: value is 4. Done.",
]
NOT_LOOPING = [
    "The quick brown fox jumps over the lazy dog while a small bird sings in the old oak tree.",
    "the cat sat on the mat and the cat sat on the mat, then left for good",  # a phrase twice is not a loop
    generated_text(0, 0, 2000),
    "",
]


@pytest.mark.parametrize("text", LOOPING)
def test_planted_loops_are_detected(text: str) -> None:
    assert repeated_phrase(text) is not None
    assert is_loop(None, text, 0.5)


@pytest.mark.parametrize("text", NOT_LOOPING)
def test_planted_non_loops_are_not(text: str) -> None:
    assert repeated_phrase(text) is None
    assert not is_loop(repetition_ratio(list(map(hash, text.split()))), text, 0.5)


def test_repetition_ratio_alone_flags_a_loop_above_the_threshold() -> None:
    ids = [1, 2, 3, 4] * 10  # 3-grams: 4 distinct of 38
    ratio = repetition_ratio(ids)
    assert ratio is not None and ratio > 0.8
    assert is_loop(ratio, "", 0.8) and not is_loop(ratio, "", 0.95)


def test_generated_prompts_do_not_repeat_and_extend_their_shorter_selves() -> None:
    long = generated_text(3, 7, 200_000)
    assert long.startswith(generated_text(3, 7, 50_000)[:-200])
    words = long.split()
    assert repetition_ratio(words) is not None and repetition_ratio(words) < 0.001  # type: ignore[operator]
    assert generated_text(3, 8, 1000) != generated_text(3, 7, 1000)


def test_a_deep_class_text_prompt_repeats_itself_and_a_generated_one_does_not() -> None:
    from specwatch.bench.prompts import seeded_content
    from specwatch_testing.fake_vllm import tokenize

    chars = 32_000 * 4  # ~32K tokens: a class text (6.6-8.1 KB) wraps around ~16 times
    wrapped = repetition_ratio(tokenize(seeded_content("code", 0, 0, chars), 32000))
    fresh = repetition_ratio(tokenize(generated_text(0, 0, chars), 32000))
    assert wrapped is not None and fresh is not None
    assert wrapped > 0.8 and fresh < 0.05, (wrapped, fresh)


# ---------------------------------------------------------------- bad input, one line each

BASE = """
name: s
model: {generate: {max_position_embeddings: 4096}, served_name: demo}
images: [{name: i, backend: endpoint, url: "http://127.0.0.1:1"}]
arms: [{name: a, image: i}]
baseline: a
workload: {max_tokens: 64}
"""


@pytest.mark.parametrize(("sweep", "expected"), [
    ("{depths: [1024, 8192]}", "depth 8192 + max_tokens 64 = 8256 is beyond max_model_len 4096"),
    ("{depths: [2048, 1024]}", "sweep.depths: [2048, 1024] is not increasing (1024 after 2048)"),
    ("{depths: [1024, 1024]}", "sweep.depths: [1024, 1024] is not increasing (1024 after 1024)"),
    ("{loop_threshold: 0}", "sweep.loop_threshold: 0.0 is outside (0, 1]"),
    ("{loop_threshold: 1.5}", "sweep.loop_threshold: 1.5 is outside (0, 1]"),
])
def test_bad_sweep_input_is_one_line_naming_field_value_and_fix(tmp_path: Path, sweep: str, expected: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(BASE + f"sweep: {sweep}\n")
    with pytest.raises(SpecError) as err:
        load_spec(path)
    (line,) = err.value.problems
    assert expected in line and "fix:" in line and "\n" not in line
    cli = subprocess.run([str(Path(sys.executable).parent / "specwatch"), "sweep", str(path)], capture_output=True,
                         text=True)
    assert cli.returncode == 1 and "Traceback" not in cli.stderr and expected in " ".join(cli.stderr.split())


def test_a_sweep_within_the_context_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(BASE + "sweep: {depths: [1024, 2048, 4032], loop_threshold: 1}\n")
    spec = load_spec(path)
    assert spec.sweep is not None and spec.sweep.depths_for(4096, 64) == [1024, 2048, 4032]
    assert type(spec.sweep)(min_depth=1024).depths_for(4096, 64) == [1024, 2048]  # 4096 + 64 does not fit


# ---------------------------------------------------------------- calibration (fake server's tokenizer)


async def calibrate_all(url: str, model: str, depths: list[int]) -> list[tuple[int, int]]:
    source = SOURCES["generated"]
    async with Client(BenchTarget(url, model, "cal"), WorkloadSpec(), SamplingSpec()) as client:
        return [(d, (await source.prompt(PromptRequest(0, i, "cal", d), client.count)).tokens)
                for i, d in enumerate(depths)]


def test_calibration_hits_every_depth_within_one_token_on_the_fake_tokenizer() -> None:
    depths = [17, 100, 1000, 4000, 30000]
    with run_fake_vllm(["--served-model-name", "demo", "--max-model-len", "65536"]) as url:
        got = asyncio.run(calibrate_all(url, "demo", depths))
    assert all(abs(tokens - depth) <= 1 for depth, tokens in got), got


# ---------------------------------------------------------------- the flow, against fake servers


@pytest.fixture(scope="module")
def fake_sweep(prefect_api: None, tmp_path_factory: pytest.TempPathFactory):
    from flows.sweep import sweep
    from specwatch.spec import ExperimentSpec

    db = tmp_path_factory.mktemp("db") / "sweep.duckdb"
    args = ["--served-model-name", "demo", "--step-ms", "4", "--max-model-len", "1024"]
    with run_fake_vllm([*args, "--spec-config", SPEC]) as spec_url, run_fake_vllm(args) as plain_url:
        doc = endpoint_ab("fake-sweep", spec_url, plain_url, design={"rounds": 2, "probes": 0},
                          workload={"prompt_classes": ["generated"], "prompt_tokens": 32, "max_tokens": 16,
                                    "concurrency": [1], "requests_per_cell": 1, "warmup_requests": 1})
        doc["arms"][1].pop("speculative")  # the no-spec control
        doc["design"]["allow_confounded"] = True
        doc["sweep"] = {"depths": [128, 256, 512, 1024], "runs": 2}
        doc["model"]["generate"] = {"max_position_embeddings": 2048}  # the file allows 1024; the servers do not
        outcome = sweep(ExperimentSpec.model_validate(doc), db=str(db))
    return outcome, db


def test_sweep_results_view_has_exactly_the_issues_columns_and_one_row_per_run(fake_sweep) -> None:
    outcome, db = fake_sweep
    columns = [r[0] for r in rows(db, "DESCRIBE sweep_results")]
    assert columns == SWEEP_COLUMNS
    got = rows(db, f"SELECT arm, depth, count(*), min(prompt_tokens), max(prompt_tokens) FROM sweep_results "
                   f"WHERE run_id = '{outcome.run_id}' GROUP BY ALL ORDER BY ALL")
    # 2 rounds x 2 runs per depth and arm; 1024 + 16 does not fit max_model_len 1024: skipped
    expected = [(arm, d, 4) for arm in ("base", "cand") for d in (128, 256, 512)]
    assert [(arm, d, n) for arm, d, n, _, _ in got] == expected
    assert all(d - 1 <= lo and hi <= d for _, d, _, lo, hi in got), got
    spec_rows = rows(db, f"SELECT mean_acceptance_length, acceptance_per_position, prefill_tok_s, decode_tok_s "
                         f"FROM sweep_results WHERE run_id = '{outcome.run_id}' AND arm = 'base'")
    assert all(m is not None and m >= 1 and len(p) == 3 and pre > 0 and dec > 0 for m, p, pre, dec in spec_rows)
    plain = rows(db, f"SELECT mean_acceptance_length FROM sweep_results WHERE run_id = '{outcome.run_id}' "
                     f"AND arm = 'cand'")
    assert plain and all(m is None for (m,) in plain)


def test_a_depth_beyond_the_servers_max_model_len_is_skipped_with_both_numbers(fake_sweep) -> None:
    outcome, db = fake_sweep
    reasons = rows(db, f"SELECT DISTINCT skip_reason FROM cells WHERE run_id = '{outcome.run_id}' AND depth = 1024")
    assert reasons == [("depth 1024 + max_tokens 16 = 1040 is beyond the server's max_model_len 1024",)]
    assert rows(db, f"SELECT count(*) FROM series_cells WHERE run_id = '{outcome.run_id}' AND prompt_tokens = 1024") \
        == [(0,)]


def test_prompts_record_their_own_repetition_and_generated_text_is_judged(fake_sweep) -> None:
    outcome, db = fake_sweep
    got = rows(db, f"SELECT max(prompt_repetition_ratio), count(requests.loop_detected), count(*) FROM requests "
                   f"JOIN cells USING (run_id, arm, round, cell) WHERE run_id = '{outcome.run_id}' AND depth > 0")
    (rep, judged, total), = got
    assert rep is not None and rep < 0.2 and judged == total > 0


def test_sweep_points_join_history_series_with_depth_in_the_key(fake_sweep) -> None:
    outcome, db = fake_sweep
    keys = rows(db, f"SELECT prompt_tokens, count(DISTINCT series_key) FROM series_points "
                    f"WHERE run_id = '{outcome.run_id}' GROUP BY ALL ORDER BY 1")
    assert [d for d, _ in keys] == [128, 256, 512]
    assert all(n == 2 for _, n in keys)  # one series per arm at each depth


def test_sweep_checks_ran_between_neighbouring_depths_and_the_report_has_both_plots(fake_sweep) -> None:
    outcome, db = fake_sweep
    checks = rows(db, f"SELECT check_name, arm, cell, passed FROM quality_results WHERE run_id = '{outcome.run_id}' "
                      f"AND check_name LIKE 'sweep.%' ORDER BY ALL")
    assert len(checks) == 2 * 2 * 2  # 2 arms x 2 steps (128->256->512) x 2 checks
    report = (outcome.run_dir / "sweep.md").read_text()
    for name in ("sweep_decode_vs_depth.png", "sweep_acceptance_vs_depth.png"):
        assert (outcome.run_dir / name).stat().st_size > 10_000 and name in report
    assert "## Across arms" in report and "| cand | 256 |" in report
    assert "skipped: depth 1024" in report


# ---------------------------------------------------------------- checks and history on a real DuckDB file


def _sweep_cell(depth: int, decode_tok_s: float, looped: bool = False):  # type: ignore[no-untyped-def]
    from specwatch import records as r

    runs = [r.RequestSample(index=i, prompt_tokens=depth, status="ok", completion_tokens=33, chunks=33,
                            ttft_s=depth / 5000, decode_s=32 / (decode_tok_s * f), e2e_s=1.0, arrival_groups=33,
                            repetition_ratio=0.9 if looped else 0.05, prompt_repetition_ratio=0.001,
                            loop_detected=looped, window_drafts=10.0, window_accepted_tokens=25.0 if looped else 12.0,
                            window_accepted_per_position=[9.0, 8.0, 8.0] if looped else [6.0, 4.0, 2.0])
            for i, f in enumerate((0.99, 1.0, 1.01))]
    window = r.SpecWindow(num_drafts=30.0, num_draft_tokens=90.0, num_accepted_tokens=75.0 if looped else 36.0,
                          accepted_per_position=[27.0, 24.0, 24.0] if looped else [18.0, 12.0, 6.0],
                          prefix_cache_hits=0.0, prefix_cache_queries=float(depth * 3))
    return r.CellResult(concurrency=1, prompt_class="generated", prompt_tokens=depth, depth=depth, max_tokens=33,
                        wall_s=3.0, window=window, requests=runs, flags=[LOOP] if looped else [])


LOOP = "acceptance inflated by loop (3 of 3 runs)"


def _sweep_run(run_id: str, decode: dict[int, float], looped: tuple[int, ...] = (), version: str = "0.32.0",  # type: ignore[no-untyped-def]
               speculating: bool = True):
    from specwatch_testing import records as factory

    arm = factory.arm("k3", 3, 1.0, [80.0, 60.0, 40.0])
    if not speculating:
        arm = arm.model_copy(update={"name": "nospec", "method": None, "k": None})
    arm.image_ref = arm.image_ref.model_copy(update={"vllm_version": version})  # type: ignore[union-attr]
    arm.cells = [_sweep_cell(d, v, d in looped) for d, v in decode.items()]
    result = factory.run(run_id, arms=[arm])
    result.experiment = {"sampling": {"temperature": 0.0}, "model": {"served_name": "demo"}}
    return result


def test_a_cliff_beyond_its_interval_is_flagged_and_a_shelf_is_not(tmp_path: Path) -> None:
    from specwatch.spec import Thresholds
    from specwatch.store import checks
    from specwatch.store.db import connect
    from specwatch.store.ingest import ingest

    db = tmp_path / "h.duckdb"
    # 1K -> 2K: -16% (the seed's slope); 2K -> 4K: -50% (a cliff); 4K -> 8K: -2% (a shelf); 8K -> 16K: +20% (a rise)
    ingest(_sweep_run("r1", {1024: 42.0, 2048: 35.3, 4096: 17.6, 8192: 17.2, 16384: 20.6}), db)
    con = connect(db)
    try:
        got = {(q.check, q.cell.split("/p")[-1]): q for q in checks.sweep_records(con, "r1", Thresholds(), 0.3)}
    finally:
        con.close()
    assert {k for k, q in got.items() if not q.passed} == {("sweep.cliff", "4096"), ("sweep.decode_falls", "16384")}
    assert "CLIFF" in got[("sweep.cliff", "4096")].detail and got[("sweep.cliff", "4096")].severity == "regression"
    assert got[("sweep.cliff", "2048")].passed and got[("sweep.cliff", "8192")].passed


@pytest.mark.parametrize("speculating", [True, False])
def test_a_speculating_arms_looping_depth_leaves_the_cliff_check_and_a_plain_arms_does_not(
        tmp_path: Path, speculating: bool) -> None:
    """k5 at 4K looped (decode inflated 2x by drafts that all land), 8K clean: comparing them reads as a
    -65% cliff that is content, not depth. The speculating arm's trend goes 2K -> 8K; an arm without
    speculation keeps its looping run (a loop cannot change its speed), so its real drop is flagged."""
    from specwatch.analysis.sweep import change_per_doubling
    from specwatch.report.sweep import sweep_points
    from specwatch.spec import Thresholds
    from specwatch.store import checks
    from specwatch.store.db import connect
    from specwatch.store.ingest import ingest

    db = tmp_path / "h.duckdb"
    ingest(_sweep_run("r1", {1024: 40.0, 2048: 34.0, 4096: 80.0, 8192: 28.0}, looped=(4096,),
                      speculating=speculating), db)
    con = connect(db)
    try:
        points = {p.depth: p for p in sweep_points(con, "r1")}
        got = {(q.check, q.cell.split("/p")[-1]): q for q in checks.sweep_records(con, "r1", Thresholds(), 0.3)}
    finally:
        con.close()
    assert points[4096].decode_tok_s == pytest.approx(80.0, rel=0.02)  # the figure itself stays in the data
    if speculating:
        assert points[4096].trend_decode_tok_s is None
        assert set(got) == {("sweep.cliff", "2048"), ("sweep.decode_falls", "2048"), ("sweep.cliff", "8192"),
                            ("sweep.decode_falls", "8192")}
        assert all(q.passed for q in got.values()), [q.detail for q in got.values()]
        assert "depth 2048 -> 8192" in got[("sweep.cliff", "8192")].detail
        # the fit over 1K, 2K and 8K: -10.9% per doubling (with the looping 4K in it: -2.1%)
        assert change_per_doubling(list(points.values()), "k3") == pytest.approx(-0.109, abs=0.002)
    else:
        assert points[4096].trend_decode_tok_s == pytest.approx(80.0, rel=0.02)
        assert not got[("sweep.cliff", "8192")].passed and not got[("sweep.decode_falls", "4096")].passed


def test_loop_cells_stay_in_the_data_but_leave_the_acceptance_trend(tmp_path: Path) -> None:
    from specwatch.report.sweep import sweep_points, write_sweep_report
    from specwatch.store.db import connect
    from specwatch.store.ingest import ingest

    db = tmp_path / "h.duckdb"
    result = _sweep_run("r1", {1024: 40.0, 2048: 34.0}, looped=(2048,))
    ingest(result, db)
    trend = rows(db, "SELECT prompt_tokens, mean_acceptance_length, decode_tok_s_median FROM series_points "
                     "ORDER BY prompt_tokens")
    assert trend[0][1] == pytest.approx(2.2) and trend[1][1] is None and trend[1][2] > 0
    per_run = rows(db, "SELECT depth, mean_acceptance_length, loop_detected FROM sweep_results ORDER BY depth")
    assert per_run == [(1024, pytest.approx(2.2), False)] * 3 + [(2048, pytest.approx(3.5), True)] * 3
    con = connect(db)
    try:
        points = sweep_points(con, "r1")
    finally:
        con.close()
    from specwatch.store import queries

    con = connect(db)
    try:
        curve = queries.run_named(con, "sweep-curve", {})
    finally:
        con.close()
    assert curve[["depth", "runs", "loop_runs"]].values.tolist() == [[1024, 3, 0], [2048, 3, 3]]
    assert curve.mean_acceptance_length.tolist()[0] == pytest.approx(2.2) and pd.isna(curve.mean_acceptance_length[1])
    looped = next(p for p in points if p.depth == 2048)
    assert looped.mean_acceptance_length is None and looped.looped_acceptance_length == pytest.approx(3.5)
    result.experiment = {**_experiment_doc(), "sampling": {"temperature": 0.0}}
    report = write_sweep_report(result, points, tmp_path / "out").read_text()
    assert "(3.50, acceptance inflated by loop)" in report
    assert (tmp_path / "out" / "sweep_acceptance_vs_depth.png").stat().st_size > 10_000


def test_a_cliff_between_two_versions_is_a_history_regression(tmp_path: Path) -> None:
    from specwatch.spec import Thresholds
    from specwatch.store import checks
    from specwatch.store.db import connect
    from specwatch.store.ingest import ingest

    db = tmp_path / "h.duckdb"
    ingest(_sweep_run("20261130T120000Z-aaaaaa", {1024: 40.0, 4096: 30.0}, version="0.31.0"), db)
    later = _sweep_run("20261130T130000Z-bbbbbb", {1024: 40.0, 4096: 15.0}, version="0.32.0")
    later.started_at = later.started_at.replace(hour=13)
    ingest(later, db)
    con = connect(db)
    try:
        records, _ = checks.history_records(con, later.run_id, Thresholds())
    finally:
        con.close()
    failed = {(q.cell, q.metric) for q in records if not q.passed}
    assert ("closed/c1/generated/p4096", "decode_tok_s_median") in failed
    assert not any(cell.endswith("p1024") for cell, _ in failed)


def _experiment_doc() -> dict:
    return {"name": "s", "model": {"generate": {}, "served_name": "demo"},
            "images": [{"name": "cpu", "backend": "endpoint", "url": "http://127.0.0.1:1"}],
            "arms": [{"name": "k3", "image": "cpu"}], "baseline": "k3"}


def test_a_sweep_depth_past_its_deadline_is_named_by_its_depth() -> None:
    """The deadline abort of an isolated sweep names and stores the depth that hung, not an A/B cell."""
    from specwatch.bench.gates import Gates
    from specwatch.bench.runner import CellsAborted, Isolated
    from specwatch.bench.sweep import SweepRunner
    from specwatch.spec import SweepSpec

    sweep = SweepSpec(depths=[64, 128], runs=1)
    wl = WorkloadSpec(prompt_classes=["code"], prompt_tokens=32, max_tokens=16, concurrency=[1],
                      requests_per_cell=1, cell_deadline_s=2.0)
    # 400 ms steps: the first depth's warm-up and run of 16 tokens outlast the 2 s deadline
    with run_fake_vllm(["--served-model-name", "demo", "--step-ms", "400"]) as url, \
            pytest.raises(CellsAborted) as aborted:
        Isolated(inner=SweepRunner(sweep)).measure(BenchTarget(url, "demo", "dl"), wl, SamplingSpec(), Gates())
    assert aborted.value.cells == []
    assert (aborted.value.key.prompt_class, aborted.value.key.prompt_tokens) == ("generated", 64)
    assert "not finished within 2s (cell_deadline_s)" in str(aborted.value)
