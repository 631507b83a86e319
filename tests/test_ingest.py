from pathlib import Path

import duckdb
import pytest

from specwatch.store import db
from specwatch.store.ingest import ingest
from specwatch.store.rundir import read_raw, write_raw
from specwatch_testing import records as rf


def counts(path: Path) -> dict[str, int]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {t: con.execute(f"select count(*) from {t}").fetchone()[0]
                for t in ("runs", "arms", "cells", "requests", "spec_positions", "cell_results")}
    finally:
        con.close()


def test_migrations_apply_once(tmp_path: Path) -> None:
    path = tmp_path / "h.duckdb"
    con = db.connect(path)
    again = db.migrate(con)
    applied = con.execute("select version, name from schema_migrations").fetchall()
    con.close()
    assert again == []
    assert applied == [(v, n) for v, n, _ in db.migrations()]
    assert len(applied) >= 1


def test_ingest_writes_every_table_and_reingest_adds_no_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "h.duckdb"
    result = rf.run()
    written = ingest(result, path)
    assert written["cells"] == 8 and written["requests"] == 32 and written["spec_positions"] == 4 * 3 + 4 * 5
    first = counts(path)
    assert first == {"runs": 1, "arms": 2, "cells": 8, "requests": 32, "spec_positions": 32, "cell_results": 8}
    ingest(result, path)
    assert counts(path) == first
    ingest(rf.run(run_id="20261130T130000Z-fedcba"), path)
    assert counts(path)["cells"] == 16


def test_cell_results_view_carries_arm_and_acceptance(tmp_path: Path) -> None:
    path = tmp_path / "h.duckdb"
    ingest(rf.run(), path)
    con = db.connect(path)
    rows = con.execute(
        "select arm, k, vllm_version, concurrency, prompt_class, decode_tok_s_median, mean_acceptance_length "
        "from cell_results where concurrency = 1 and prompt_class = 'code' order by arm"
    ).fetchall()
    env = con.execute("select launch_env from arms where arm = 'k5'").fetchone()[0]
    con.close()
    assert rows == [
        ("k3", 3, "0.32.0", 1, "code", pytest.approx(32.0), pytest.approx(1 + 180 / 100)),
        ("k5", 5, "0.32.0", 1, "code", pytest.approx(32 / 0.9), pytest.approx(1 + 210 / 100)),
    ]
    assert "***" in env
    con = db.connect(path)
    sizes = con.execute("select distinct prompt_tokens, server_prompt_tokens from cells").fetchall()
    con.close()
    assert sizes == [(128, 129.0 * 4)]  # the target length is not overwritten by the server's counter


def test_raw_json_round_trips_and_reloads_into_a_fresh_db(tmp_path: Path) -> None:
    result = rf.run()
    write_raw(result, tmp_path / "run")
    again = read_raw(tmp_path / "run")
    assert again.arms[1].cells[0].window.mean_acceptance_length == result.arms[1].cells[0].window.mean_acceptance_length
    ingest(again, tmp_path / "h.duckdb")
    assert counts(tmp_path / "h.duckdb")["requests"] == 32


def test_read_raw_names_the_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="results.json"):
        read_raw(tmp_path)


def test_a_run_rebuilt_from_duckdb_equals_the_one_ingested(tmp_path: Path) -> None:
    from specwatch.records import ClientCheck, QualityRecord
    from specwatch.store.ingest import load

    result = rf.run()
    result.arms[0].cells[0].client = ClientCheck(workers=2, transport="aiohttp", loop_lag_ms_p99=1.5, cpu_share_max=0.4)
    result.arms[0].probes = [[1, 2, 3], [4, 5]]
    result.arms[1].k_requested, result.arms[1].fallback_reason = 7, "k=7 rejected at startup: boom"
    result.quality = [QualityRecord(arm="k5", check="c", metric="m", value=1.0, passed=False, severity="regression")]
    path = tmp_path / "h.duckdb"
    ingest(result, path)
    con = db.connect(path)
    again = load(con, result.run_id)
    con.close()
    assert again.model_dump() == result.model_dump()
    assert again.exit_code() == result.exit_code() == 3


def test_migration_004_carries_rows_over_with_their_cell_key(tmp_path: Path) -> None:
    """A database at schema 003 (the last one keyed by concurrency and prompt class) keeps its rows."""
    con = rf.database_at(tmp_path / "old.duckdb", 3)
    con.execute("insert into runs (run_id, experiment_name) values ('r1', 'old')")
    con.execute("insert into arms (run_id, arm, block, status) values ('r1', 'k5', 1, 'ok')")
    for c, pc in ((1, "code"), (4, "prose")):
        con.execute("insert into cells (run_id, arm, block, concurrency, prompt_class, prompt_tokens, rejected, "
                    "decode_tok_s_median) values ('r1', 'k5', 1, ?, ?, 128, false, 40.0 + ?)", [c, pc, c])
        con.execute("insert into spec_positions values ('r1', 'k5', 1, ?, ?, 0, 80.0, 0.8)", [c, pc])
        con.execute("insert into requests (run_id, arm, block, concurrency, prompt_class, idx, status) "
                    "values ('r1', 'k5', 1, ?, ?, 0, 'ok')", [c, pc])
    con.execute("insert into quality_results (run_id, arm, block, concurrency, prompt_class, check_name, metric, "
                "passed, severity) values ('r1', 'k5', null, 4, 'prose', 'x', 'm', true, 'regression')")
    assert db.migrate(con)[0] == "004_cell_key.sql"
    cells = con.execute("select cell, load_mode, concurrency, decode_tok_s_median from cells order by cell").fetchall()
    assert cells == [("closed/c1/code/p128", "closed", 1, 41.0), ("closed/c4/prose/p128", "closed", 4, 44.0)]
    assert con.execute("select cell from spec_positions order by cell").fetchall() == [
        ("closed/c1/code/p128",), ("closed/c4/prose/p128",)]
    assert con.execute("select count(*) from requests where cell is null").fetchone() == (0,)
    assert con.execute("select cell from quality_results").fetchall() == [("closed/c4/prose/p128",)]
    # the cell is the key now: a second row for the same cell is refused
    with pytest.raises(duckdb.ConstraintException):
        con.execute("insert into cells (run_id, arm, round, cell, load_mode, prompt_class, prompt_tokens, rejected) "
                    "values ('r1', 'k5', 1, 'closed/c1/code/p128', 'closed', 'code', 128, false)")
    con.close()


def test_migration_018_renames_block_to_round_and_keeps_the_rows(tmp_path: Path) -> None:
    """A database at schema 017 (launches numbered by `block`, the experiment's design.blocks) holding a run:
    every table's column is `round` after the upgrade, the run reads back whole with its design in rounds, the
    views read the new column and the keys still hold."""
    from specwatch.records import QualityRecord
    from specwatch.store.ingest import frames, load

    result = rf.run()
    result.arms[0].probes = [[1, 2, 3]]
    result.quality = [QualityRecord(arm="k5", round=None, check="c", metric="m", value=1.0, passed=False,
                                    severity="regression")]
    result.experiment["design"] = {"rounds": 3, "max_rounds": 5, "adaptive": True}
    stored = result.model_copy(update={"experiment": {**result.experiment, "design": {
        "blocks": 3, "max_blocks": 5, "adaptive": True}}})
    con = rf.database_at(tmp_path / "old.duckdb", 17)
    rf.append_as_stored(con, {t: f.rename(columns={"round": "block"}) for t, f in frames(stored).items()})
    # 018 and every migration after it (a database at 17 has none of them)
    assert db.migrate(con) == [name for version, name, _ in db.migrations() if version >= 18]
    assert con.execute("select table_name from duckdb_columns() where column_name = 'block' "
                       "and database_name = current_database()").fetchall() == []
    assert load(con, result.run_id).model_dump() == result.model_dump()
    assert con.execute("select arm, round, count(*) from cell_results group by all order by arm").fetchall() == [
        ("k3", 1, 4), ("k5", 1, 4)]
    with pytest.raises(duckdb.ConstraintException):  # the primary key holds the renamed column
        con.execute("insert into arms (run_id, arm, round, status) values (?, 'k5', 1, 'ok')", [result.run_id])
    con.close()


def test_cell_keys_name_closed_loop_and_rate_cells() -> None:
    from specwatch.records import CellKey

    closed = CellKey(concurrency=4, prompt_class="code", prompt_tokens=256)
    rate = CellKey(load="rate", rate=2.5, prompt_class="code", prompt_tokens=256)
    assert (closed.id, closed.label) == ("closed/c4/code/p256", "c=4 code")
    assert (rate.id, rate.label) == ("rate/r2.5/code/p256", "r=2.5/s code")
    assert sorted([rate, closed], key=CellKey.sort_key) == [closed, rate]
    with pytest.raises(ValueError, match="a closed-loop cell has a concurrency"):
        CellKey(load="rate", concurrency=4, prompt_class="code", prompt_tokens=256)


def test_the_variances_a_run_read_are_kept_with_it_and_none_for_an_older_run(tmp_path: Path) -> None:
    """Migration 019: a run stored before it reads back with variance_priors None (looked up again when
    judged); a run that recorded them reads back with exactly those, an empty list included."""
    from specwatch.records import RecordedPrior
    from specwatch.store.ingest import frames, load

    older = rf.run("older")
    con = rf.database_at(tmp_path / "old.duckdb", 18)
    rf.append_as_stored(con, frames(older))
    assert db.migrate(con) == [name for version, name, _ in db.migrations() if version >= 19]
    assert load(con, "older").variance_priors is None
    for run_id, kept in (("with", [RecordedPrior(cell="composite", metric="decode_tok_s", sd=0.043, df=3,
                                                 source="A/A calibration aa-1")]), ("none-usable", [])):
        newer = rf.run(run_id).model_copy(update={"variance_priors": kept})
        for table, frame in frames(newer).items():
            db.append(con, table, frame)
        assert load(con, run_id).variance_priors == kept
    con.close()
