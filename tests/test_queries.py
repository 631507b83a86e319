"""History views (migration 003) and the named queries in sql/queries, on a planted history.

The history (all runs ngram, model "/m", checkpoint "cd"*32, greedy; decode tok/s of a
request = 32 / decode_s, mean acceptance length = 1 + sum(per_pos) / 100):

  run  day host        prompt  version  k3 decode (tok/s)        k5 decode   notes
  r1   1   Xeon A      128     0.27.0   32                       35.56
  r2   2   Xeon A      128     0.27.0   40                       35.56       old failed regression row
  r3   3   Xeon A      128     0.32.0   40, MAL 3.1              35.56       k3 (c=1, code) cell rejected (3.2)
  r4   4   Xeon A      128     0.32.0   rounds 50 / 64 / 32      35.56       failed + passed regression, failed sanity
  r5   1   EPYC B      128     0.27.0   64                       -
  r6   3   EPYC B      128     0.32.0   51.2                     -
  r7   4   Xeon A      512     0.32.0   10                       -
  r8   1   Xeon A tp2  128     0.27.0   16                       -
  r9   2   Xeon A      128     0.27.0   -          (k3 -tp 4 and k5 --tensor-parallel-size=8, served as "demo")

So on Xeon A / 128 tokens / tp1, k3 goes from median(32, 40) = 36 on 0.27.0 to
median(40, 50) = 45 on 0.32.0 (+25 %), MAL 2.8 -> 3.1 (+10.71 %); on EPYC B 64 -> 51.2 (-20 %).
Mixing in r7 (another prompt length), r8/r9 (other tensor-parallel sizes), r5/r6 (another
host) or the rejected cell would move those numbers.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest

from specwatch.records import QualityRecord
from specwatch.store import db
from specwatch.store import queries as q
from specwatch.store.ingest import ingest
from specwatch_testing import records as rf

K3_POS = [80.0, 60.0, 40.0]  # MAL 2.8
K3_POS_NEW = [90.0, 70.0, 50.0]  # MAL 3.1
K5_POS = [80.0, 60.0, 40.0, 20.0, 10.0]  # MAL 3.1
CELLS = [(1, "code"), (1, "prose"), (4, "code"), (4, "prose")]


def _arm(name: str, k: int, decode_s: float, per_pos: list[float], version: str, day: int, *,
         round_no: int = 1, prompt_tokens: int = 128, argv: list[str] | None = None):
    a = rf.arm(name, k, decode_s, per_pos)
    a.round = round_no
    a.image = f"cpu-{version}"
    a.image_ref = a.image_ref.model_copy(update={"name": a.image, "vllm_version": version})
    a.started_at = rf.T0 + timedelta(days=day, minutes=round_no)
    a.ended_at = a.started_at + timedelta(minutes=1)
    if argv is not None:
        a.launch = a.launch.model_copy(update={"argv": argv})
    for c in a.cells:
        c.prompt_tokens = prompt_tokens
    return a


def _run(run_id: str, day: int, arms: list, *, cpu: str = "Xeon A", quality: list | None = None,
         served_name: str | None = None):
    r = rf.run(run_id=run_id, arms=arms)
    r.started_at = rf.T0 + timedelta(days=day)
    r.ended_at = r.started_at + timedelta(minutes=30)
    r.provenance.host.cpu_model = cpu
    r.provenance.host.cpu_count = 2
    if served_name:
        r.experiment = {**r.experiment, "model": {"path": None, "served_name": served_name}}
    r.quality = quality or []
    return r


def _regression(arm: str, value: float, baseline: float, passed: bool, severity: str = "regression") -> QualityRecord:
    return QualityRecord(arm=arm, round=1, concurrency=1, prompt_class="code", check="regression.decode_tok_s",
                         metric="decode_tok_s_median", value=value, baseline_value=baseline, threshold=0.05,
                         passed=passed, severity=severity, detail="planted")


def history() -> list:
    r3_k3 = _arm("k3", 3, 0.8, K3_POS_NEW, "0.32.0", 3)
    bad = next(c for c in r3_k3.cells if (c.concurrency, c.prompt_class) == (1, "code"))
    for s in bad.requests:
        s.decode_s = 10.0
    bad.rejected, bad.reject_reason = True, "planted"
    return [
        _run("r1", 1, [_arm("k3", 3, 1.0, K3_POS, "0.27.0", 1), _arm("k5", 5, 0.9, K5_POS, "0.27.0", 1)]),
        _run("r2", 2, [_arm("k3", 3, 0.8, K3_POS, "0.27.0", 2), _arm("k5", 5, 0.9, K5_POS, "0.27.0", 2)],
             quality=[_regression("k5", 20.0, 40.0, passed=False)]),
        _run("r3", 3, [r3_k3, _arm("k5", 5, 0.9, K5_POS, "0.32.0", 3)]),
        _run("r4", 4, [
            _arm("k3", 3, 0.64, K3_POS_NEW, "0.32.0", 4, round_no=1),
            _arm("k3", 3, 0.5, K3_POS_NEW, "0.32.0", 4, round_no=2),
            _arm("k3", 3, 1.0, K3_POS_NEW, "0.32.0", 4, round_no=3),
            _arm("k5", 5, 0.9, K5_POS, "0.32.0", 4),
        ], quality=[
            _regression("k5", 30.0, 40.0, passed=False),
            _regression("k5", 39.5, 40.0, passed=True),
            _regression("k5", 0.0, 1.0, passed=False, severity="invalid"),
        ]),
        _run("r5", 1, [_arm("k3", 3, 0.5, K3_POS, "0.27.0", 1)], cpu="EPYC B"),
        _run("r6", 3, [_arm("k3", 3, 0.625, K3_POS, "0.32.0", 3)], cpu="EPYC B"),
        _run("r7", 4, [_arm("k3", 3, 3.2, K3_POS_NEW, "0.32.0", 4, prompt_tokens=512)]),
        _run("r8", 1, [_arm("k3", 3, 2.0, K3_POS, "0.27.0", 1, argv=["--tensor-parallel-size", "2"])]),
        _run("r9", 2, [_arm("k3", 3, 2.0, K3_POS, "0.27.0", 2, argv=["--api-key", "***", "-tp", "4"]),
                       _arm("k5", 5, 2.0, K5_POS, "0.27.0", 2, argv=["--tensor-parallel-size=8"])],
             served_name="demo"),
    ]


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("history") / "h.duckdb"
    for result in history():
        ingest(result, path)
    c = db.connect(path)
    # r2's failed regression was recorded a month ago: in the regressions view, not in the last 7 days
    c.execute("UPDATE quality_results SET created_at = current_timestamp - INTERVAL 30 DAY WHERE run_id = 'r2'")
    yield c
    c.close()


def rows(frame: pd.DataFrame, **match) -> pd.DataFrame:
    for col, value in match.items():
        frame = frame[frame[col] == value]
    return frame


def one(frame: pd.DataFrame, **match) -> pd.Series:
    found = rows(frame, **match)
    assert len(found) == 1, f"expected one row for {match}, got {len(found)}:\n{found}"
    return found.iloc[0]


# ------------------------------------------------------------------------------------- views


def test_series_cells_has_one_row_per_kept_cell_with_its_key(con) -> None:
    cells = con.execute("select count(*) from cells").fetchone()[0]
    rejected = con.execute("select count(*) from cells where rejected").fetchone()[0]
    frame = con.execute("select * from series_cells").df()
    assert rejected == 1 and len(frame) == cells - 1 > 0
    assert rows(frame, run_id="r3", arm="k3", concurrency=1, prompt_class="code").empty
    # md5 of the JSON array of the key fields, in the documented order
    r1 = one(frame, run_id="r1", arm="k3", concurrency=4, prompt_class="prose")
    fields = ["/m", "cd" * 32, "ngram", "3", "prose", "128", "33", "4", '{"temperature":0.0}', "Xeon A", None, "0", "1"]
    expected = con.execute("select md5(CAST(to_json($f::VARCHAR[]) AS VARCHAR))", {"f": fields}).fetchone()[0]
    assert r1.series_key == expected
    assert (r1.model, r1.k, r1.prompt_tokens, r1.sampling, r1.gpu_count, r1.tensor_parallel_size, r1.vllm_version) == (
        "/m", 3, 128, '{"temperature":0.0}', 0, 1, "0.27.0")
    assert r1.host_class == "Xeon A tp1"


def test_tensor_parallel_size_parsed_from_launch_argv(con) -> None:
    tp = dict(con.execute(
        "select run_id || '/' || arm, any_value(tensor_parallel_size) from series_cells group by all").fetchall())
    assert tp["r1/k3"] == 1 and tp["r8/k3"] == 2 and tp["r9/k3"] == 4 and tp["r9/k5"] == 8


def test_model_is_served_name_else_checkpoint_path(con) -> None:
    models = dict(con.execute("select run_id, any_value(model) from series_cells group by run_id").fetchall())
    assert models["r9"] == "demo" and models["r1"] == "/m"


def test_series_never_mix_host_prompt_length_or_tensor_parallel(con) -> None:
    keys = con.execute(
        "select run_id, series_key from series_cells where arm = 'k3' and concurrency = 4 and prompt_class = 'prose'"
    ).fetchall()
    by_run = dict(keys)
    assert by_run["r1"] == by_run["r2"] == by_run["r3"] == by_run["r4"]  # same series across images and days
    others = [by_run[r] for r in ("r5", "r7", "r8", "r9")]
    assert len(set(others)) == 4 and by_run["r1"] not in others
    assert by_run["r5"] == by_run["r6"]  # EPYC B is one series over its two images
    # k is part of the key
    k5 = con.execute("select distinct series_key from series_cells where run_id = 'r1' and arm = 'k5' "
                     "and concurrency = 4 and prompt_class = 'prose'").fetchall()
    assert k5 and k5[0][0] != by_run["r1"]


def test_series_points_take_the_median_over_rounds(con) -> None:
    frame = con.execute("select * from series_points where run_id = 'r4' and arm = 'k3'").df()
    assert len(frame) == 4  # one point per cell, not per round
    assert set(frame.rounds) == {3}
    assert frame.decode_tok_s_median.tolist() == pytest.approx([50.0] * 4)  # median of 50, 64, 32
    assert frame.regression_flagged.all()
    assert not con.execute("select bool_or(regression_flagged) from series_points where run_id = 'r3'").fetchone()[0]


def test_series_view_lists_each_series_once(con) -> None:
    frame = con.execute("select * from series").df()
    assert frame.series_key.is_unique and len(frame) > 0
    row = one(frame, host_class="Xeon A tp1", k=3, concurrency=4, prompt_class="prose", prompt_tokens=128, model="/m")
    assert row.runs == 4 and row.last_vllm_version == "0.32.0" and row.last_decode_tok_s == pytest.approx(50.0)


def test_regressions_view_shows_failed_regressions_only(con) -> None:
    frame = con.execute('select * from regressions order by run_id').df()
    assert frame.run_id.tolist() == ["r2", "r4"]
    r4 = one(frame, run_id="r4")
    assert (r4.arm, r4.concurrency, r4.prompt_class, r4.metric, r4["check"]) == (
        "k5", 1, "code", "decode_tok_s_median", "regression.decode_tok_s")
    assert (r4.baseline_value, r4.value, r4.delta_pct) == pytest.approx((40.0, 30.0, -25.0))
    assert r4.vllm_version == "0.32.0" and pd.notna(r4.created_at)
    assert list(frame.columns[:10]) == ["run_id", "arm", "concurrency", "prompt_class", "metric", "baseline_value",
                                        "value", "delta_pct", "check", "created_at"]


def test_run_flags(con) -> None:
    flags = {r[0]: r[1:] for r in con.execute(
        "select run_id, regression_flagged, invalid_flagged from run_flags").fetchall()}
    assert flags["r4"] == (True, True) and flags["r2"] == (True, False) and flags["r1"] == (False, False)


# ------------------------------------------------------------------------------ named queries


def test_every_query_file_has_a_valid_header() -> None:
    named = q.named_queries()
    assert {"image-vs-image", "k-vs-k", "acceptance-trend", "regressions-last-7d"} <= set(named)
    for query in named.values():
        assert query.description and query.path.name == f"{query.name}.sql"
    assert named["image-vs-image"].required == ["image_a", "image_b"]
    assert named["regressions-last-7d"].param("days").default == "7"
    assert named["acceptance-trend"].param("method").default is None and not named["acceptance-trend"].required


def test_image_vs_image_delta_is_what_was_planted(con) -> None:
    frame = q.run_named(con, "image-vs-image", {"image_a": "0.27.0", "image_b": "0.32.0"})
    assert len(frame) > 0
    xeon = rows(frame, host_class="Xeon A tp1", prompt_tokens=128, model="/m")
    assert len(xeon) == 8  # 2 k x 2 concurrency x 2 prompt classes
    k3 = one(xeon, k=3, concurrency=4, prompt_class="prose")
    assert (k3.runs_a, k3.runs_b) == (2, 2)
    assert (k3.decode_tok_s_a, k3.decode_tok_s_b, k3.decode_delta_pct) == pytest.approx((36.0, 45.0, 25.0))
    assert (k3.mean_acceptance_length_a, k3.mean_acceptance_length_b) == pytest.approx((2.8, 3.1))
    assert k3.acceptance_delta_pct == pytest.approx(10.71)
    # the rejected cell of r3 does not count: only r4 is left on 0.32.0 for (c=1, code)
    k3_c1 = one(xeon, k=3, concurrency=1, prompt_class="code")
    assert k3_c1.runs_b == 1
    assert (k3_c1.decode_tok_s_b, k3_c1.decode_delta_pct) == pytest.approx((50.0, 38.89))
    k5 = one(xeon, k=5, concurrency=1, prompt_class="code")
    assert k5.decode_delta_pct == pytest.approx(0.0)
    # another host class is its own series with its own delta
    epyc = one(frame, host_class="EPYC B tp1", k=3, concurrency=4, prompt_class="prose")
    assert (epyc.decode_tok_s_a, epyc.decode_tok_s_b, epyc.decode_delta_pct) == pytest.approx((64.0, 51.2, -20.0))
    # series that ran on one image only (512-token prompts, tp 2/4/8) have no row
    assert set(frame.prompt_tokens) == {128}
    assert set(frame.host_class) == {"Xeon A tp1", "EPYC B tp1"}


def test_image_vs_image_filters(con) -> None:
    base = {"image_a": "0.27.0", "image_b": "0.32.0"}
    only_k5 = q.run_named(con, "image-vs-image", {**base, "k": "5"})
    assert len(only_k5) == 4 and set(only_k5.k) == {5}
    assert q.run_named(con, "image-vs-image", {**base, "method": "eagle"}).empty
    # an empty value is the default (no filter)
    assert len(q.run_named(con, "image-vs-image", {**base, "method": ""})) == 12


def test_k_vs_k_compares_within_one_image(con) -> None:
    frame = q.run_named(con, "k-vs-k", {"k_a": "3", "k_b": "5"})
    assert set(frame.vllm_version) == {"0.27.0", "0.32.0"}
    new = one(frame, vllm_version="0.32.0", concurrency=4, prompt_class="prose")
    assert (new.runs_a, new.runs_b) == (2, 2)
    assert (new.decode_tok_s_a, new.decode_tok_s_b) == pytest.approx((45.0, 35.56))
    assert new.decode_delta_pct == pytest.approx(100 * (32 / 0.9 / 45 - 1), abs=0.01)
    assert (new.mean_acceptance_length_a, new.mean_acceptance_length_b) == pytest.approx((3.1, 3.1))
    old = one(frame, vllm_version="0.27.0", concurrency=4, prompt_class="prose")
    assert (old.decode_tok_s_a, old.mean_acceptance_length_a, old.mean_acceptance_length_b) == pytest.approx(
        (36.0, 2.8, 3.1))
    # r9's k3 (tp 4) and k5 (tp 8) are different host classes: never paired
    assert set(frame.host_class) == {"Xeon A tp1"}
    assert len(frame) == 8
    only_new = q.run_named(con, "k-vs-k", {"k_a": "3", "k_b": "5", "image": "0.32.0"})
    assert set(only_new.vllm_version) == {"0.32.0"} and len(only_new) == 4


def test_acceptance_trend_follows_one_series_over_time(con) -> None:
    frame = q.run_named(con, "acceptance-trend", {"k": "3", "concurrency": "4", "prompt_class": "prose"})
    xeon = rows(frame, host_class="Xeon A tp1", prompt_tokens=128, model="/m")
    assert xeon.run_id.tolist() == ["r1", "r2", "r3", "r4"]
    assert xeon.vllm_version.tolist() == ["0.27.0", "0.27.0", "0.32.0", "0.32.0"]
    assert xeon.mean_acceptance_length.tolist() == pytest.approx([2.8, 2.8, 3.1, 3.1])
    assert xeon.decode_tok_s.tolist() == pytest.approx([32.0, 40.0, 40.0, 50.0])
    assert xeon.acceptance_change_pct.tolist()[1:] == pytest.approx([0.0, 10.71, 0.0])
    assert pd.isna(xeon.acceptance_change_pct.iloc[0])
    assert xeon.decode_tok_s_median_7.tolist() == pytest.approx([32.0, 36.0, 40.0, 40.0])
    assert xeon.regression_flagged.tolist() == [False, True, False, True]
    assert xeon.series_key.nunique() == 1
    # the other hosts / prompt lengths / tp sizes are other series, each with its own history
    assert frame.series_key.nunique() == 5
    epyc = rows(frame, host_class="EPYC B tp1")
    assert epyc.run_id.tolist() == ["r5", "r6"] and epyc.decode_change_pct.iloc[1] == pytest.approx(-20.0)


def test_acceptance_trend_filters(con) -> None:
    everything = q.run_named(con, "acceptance-trend", {})
    assert len(everything) == con.execute("select count(*) from series_points").fetchone()[0] > 0
    key = one(everything, run_id="r5", concurrency=1, prompt_class="code").series_key
    by_series = q.run_named(con, "acceptance-trend", {"series": key[:10]})
    assert by_series.run_id.tolist() == ["r5", "r6"]
    since = q.run_named(con, "acceptance-trend", {"since": str((rf.T0 + timedelta(days=3)).date())})
    assert set(since.run_id) == {"r3", "r4", "r6", "r7"}
    # since hides older points but the first point shown still compares with the one before it
    r3 = one(since, run_id="r3", arm="k3", concurrency=4, prompt_class="prose")
    changes = (r3.acceptance_change_pct, r3.decode_change_pct, r3.decode_tok_s_median_7)
    assert changes == pytest.approx((10.71, 0.0, 40.0))
    assert set(q.run_named(con, "acceptance-trend", {"model": "demo"}).run_id) == {"r9"}
    assert q.run_named(con, "acceptance-trend", {"method": "eagle"}).empty


def test_regressions_last_7d(con) -> None:
    frame = q.run_named(con, "regressions-last-7d", {})
    assert len(frame) == 1
    row = frame.iloc[0]
    assert (row.run_id, row.arm, row.metric, row["check"], row.delta_pct) == (
        "r4", "k5", "decode_tok_s_median", "regression.decode_tok_s", pytest.approx(-25.0))
    month = q.run_named(con, "regressions-last-7d", {"days": "40"})
    assert month.run_id.tolist() == ["r4", "r2"]


def test_series_query(con) -> None:
    frame = q.run_named(con, "series", {"k": "5"})
    assert len(frame) > 0 and set(frame.k) == {5}
    assert frame.series_key.is_unique


# ------------------------------------------------------------------------------------ errors


def test_unknown_query_lists_the_known_ones(con) -> None:
    with pytest.raises(q.QueryError) as err:
        q.run_named(con, "image-vs-imag", {})
    text = str(err.value)
    assert "unknown query 'image-vs-imag'" in text and "did you mean image-vs-image" in text
    for name in ("acceptance-trend", "image-vs-image", "k-vs-k", "regressions-last-7d"):
        assert name in text


def test_missing_param_is_named_with_the_fix(con) -> None:
    with pytest.raises(q.QueryError, match=r"needs parameter image_b: add --param image_b=VALUE"):
        q.run_named(con, "image-vs-image", {"image_a": "0.27.0"})
    with pytest.raises(q.QueryError, match=r"needs parameter k_a"):
        q.run_named(con, "k-vs-k", {"k_a": " ", "k_b": "5"})


def test_unknown_param_is_named(con) -> None:
    with pytest.raises(q.QueryError, match=r"has no parameter 'imagea' \(did you mean image_a\?\); its parameters: "
                                           r"image_a, image_b, method=NULL"):
        q.run_named(con, "image-vs-image", {"image_a": "0.27.0", "image_b": "0.32.0", "imagea": "x"})


def test_bad_value_names_the_values(con) -> None:
    with pytest.raises(q.QueryError) as err:
        q.run_named(con, "k-vs-k", {"k_a": "three", "k_b": "5"})
    assert "k_a='three'" in str(err.value) and "three" in str(err.value) and "LINE" not in str(err.value)


def test_values_are_parameters_not_sql(con) -> None:
    evil = "0.27.0'; DROP TABLE runs; --"
    assert q.run_named(con, "image-vs-image", {"image_a": evil, "image_b": "0.32.0"}).empty
    assert con.execute("select count(*) from runs").fetchone()[0] == 9


def test_parse_param_args() -> None:
    assert q.parse_param_args(["image_a=0.27.0", "method=", "x=a=b"]) == {"image_a": "0.27.0", "method": "", "x": "a=b"}
    with pytest.raises(q.QueryError, match="is not NAME=VALUE"):
        q.parse_param_args(["image_a"])
    with pytest.raises(q.QueryError, match="given twice"):
        q.parse_param_args(["k=1", "k=2"])


def test_header_must_match_the_sql(tmp_path: Path) -> None:
    good = "-- name: demo\n-- params: a, b=NULL, c=7\n-- What it does.\nSELECT $a, $b, $c\n"
    parsed = q.parse(good, tmp_path / "demo.sql")
    assert [p.describe() for p in parsed.params] == ["a", "b=NULL", "c=7"] and parsed.description == "What it does."
    with pytest.raises(q.QueryError, match=r"declares a but the SQL uses \$a, \$z"):
        q.parse("-- name: demo\n-- params: a\nSELECT $a, $z -- $comment\n", tmp_path / "demo.sql")
    with pytest.raises(q.QueryError, match="differs from the file name"):
        q.parse(good, tmp_path / "other.sql")
    with pytest.raises(q.QueryError, match="second line"):
        q.parse("-- name: demo\nSELECT 1\n", tmp_path / "demo.sql")


def test_database_before_migration_003(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    ingest(history()[0], path)
    c = db.connect(path)
    for view in ("regressions", "series", "series_points", "run_flags", "series_cells"):
        c.execute(f"DROP VIEW {view}")
    # a database from before 003 lacks 009's redefinition of these views too
    c.execute("DELETE FROM schema_migrations WHERE version IN (3, 9)")
    c.close()
    ro = db.connect(path, read_only=True)
    with pytest.raises(q.QueryError, match="lacks migration"):
        q.run_named(ro, "series", {})
    ro.close()
    c = q.connect(path)  # adds the views once
    try:
        assert len(q.run_named(c, "series", {})) == 8
    finally:
        c.close()
    with pytest.raises(q.QueryError, match="no database"):
        q.connect(tmp_path / "missing.duckdb")
