"""Views live one per file in sql/views/ and are re-created after the migrations (issue 20):
every database, fresh or upgraded from an older version, holds exactly those views, and no
migration defines a view again."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from specwatch.store import db
from specwatch.store import queries as q
from specwatch_testing import records as rf


def held_views(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[str, str]]]:
    """Each view of the database with its columns (name, type)."""
    names = [row[0] for row in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()]
    return {name: [(col, kind) for col, kind, *_ in con.execute(f"DESCRIBE {name}").fetchall()] for name in names}


def sql_only(text: str) -> str:
    return re.sub(r"--[^\n]*", "", text)


def test_each_view_file_defines_the_view_it_is_named_after() -> None:
    files = sorted((db.sql_root() / "views").iterdir())
    assert len(files) == len(db.views()) >= 1  # no file in sql/views/ escapes the naming rule
    for name, text in db.views():
        assert re.findall(r"\bVIEW\s+(\w+)", sql_only(text), re.IGNORECASE) == [name]
        assert re.search(rf"CREATE OR REPLACE VIEW {name} AS", text)


def test_a_view_reads_only_views_of_lower_levels() -> None:
    """The level prefix is the creation order: a view of the same or a higher level may not be there yet."""
    levels = {m.group(2): int(m.group(1)) for m in (re.match(r"(\d+)_(\w+)\.sql$", f.name)
                                                   for f in (db.sql_root() / "views").iterdir()) if m}
    for name, text in db.views():
        body = sql_only(text).split(" AS", 1)[1]
        too_high = [other for other, level in levels.items()
                    if level >= levels[name] and re.search(rf"\b{other}\b", body)]
        assert too_high == [], f"{name} (level {levels[name]}) reads {too_high}: give it a higher level"


def test_no_migration_defines_a_view() -> None:
    for _, name, text in db.migrations():
        assert not re.search(r"\b(CREATE|ALTER)\s+(OR\s+REPLACE\s+)?VIEW\b", sql_only(text), re.IGNORECASE), (
            f"{name} defines a view: views live in sql/views/, migrations hold only table changes and data moves")


def test_a_fresh_database_holds_every_view_and_records_it(tmp_path: Path) -> None:
    con = db.connect(tmp_path / "h.duckdb")
    try:
        assert sorted(held_views(con)) == sorted(name for name, _ in db.views())
        assert db.stale_views(con) == []
        assert db.migrate(con) == [] and db.stale_views(con) == []
    finally:
        con.close()


@pytest.mark.parametrize("at", [1, 8, 12])
def test_a_database_at_an_older_migration_upgrades_to_the_view_files(tmp_path: Path, at: int) -> None:
    """An older version left its own views (here: stand-ins of the same names) and no record of them."""
    fresh = db.connect(tmp_path / "fresh.duckdb")
    expected = held_views(fresh)
    fresh.close()
    path = tmp_path / "old.duckdb"
    con = rf.database_at(path, at)
    for name in ("cell_results", "series_cells", "series_points", "series"):
        con.execute(f"CREATE VIEW {name} AS SELECT 1 AS left_by_an_older_version")
    con.close()
    con = db.connect(path)
    try:
        assert held_views(con) == expected
        assert db.stale_views(con) == []
    finally:
        con.close()


def test_a_changed_view_file_is_re_created_and_a_read_only_open_sees_it_stale(tmp_path: Path) -> None:
    path = tmp_path / "h.duckdb"
    con = db.connect(path)
    con.execute("CREATE OR REPLACE VIEW series AS SELECT 1 AS older_text")
    con.execute("UPDATE schema_views SET sha256 = 'older' WHERE name = 'series'")
    con.close()
    ro = db.connect(path, read_only=True)
    try:
        assert db.stale_views(ro) == ["series"]
        with pytest.raises(q.QueryError, match="current text of view"):
            q.run_named(ro, "series", {})
    finally:
        ro.close()
    con = q.connect(path)  # opened read-write once: the view is its file's again
    try:
        assert db.stale_views(con) == []
        assert ("series_key", "VARCHAR") in held_views(con)["series"]
    finally:
        con.close()


def test_views_read_the_rows_after_an_upgrade(tmp_path: Path) -> None:
    """Re-creating the views keeps the data: an ingested run is still seen through them."""
    from specwatch.store.ingest import ingest

    path = tmp_path / "h.duckdb"
    ingest(rf.run(), path)
    con = db.connect(path)
    con.execute("DELETE FROM schema_views")  # as a database written before views had files
    con.close()
    con = db.connect(path)
    try:
        assert con.execute("SELECT count(*) FROM cell_results").fetchone() == (8,)
        assert con.execute("SELECT count(*) FROM schema_views").fetchone() == (len(db.views()),)
    finally:
        con.close()
