"""DuckDB access: connection, numbered migrations, views, and the SQL files under `sql/`.

All SQL lives in `sql/`; Python only passes parameters. DuckDB allows one writing
process at a time, so `connect` retries while another run holds the file.

Migrations (`sql/migrations/`) change tables and move data; views live one per file in
`sql/views/` and are re-created when a migration ran or a view file changed (issue 20), so a
view's current text is its file. Migrations 001-013 created views before that; their view statements were removed:
schema_migrations records a migration's number and name, never its text, and the re-created
views replace whatever an older version left in a database.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import time
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

log = logging.getLogger("specwatch.db")

_MIGRATION = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
# `<level>_<view name>.sql`: a view reads tables and views of lower levels only, so creating them
# by level (then name) finds every view a definition reads already there.
_VIEW = re.compile(r"^(\d+)_([a-z0-9_]+)\.sql$")


class DatabaseError(Exception):
    pass


def sql_root() -> Path:
    # `sql/` ships as package data of the top-level `sql` package.
    return Path(str(resources.files("sql")))


def load_sql(relpath: str) -> str:
    path = sql_root() / relpath
    if not path.is_file():
        raise DatabaseError(f"no SQL file {relpath!r} under {sql_root()}")
    return path.read_text()


def one_line(exc: BaseException) -> str:
    """DuckDB's messages may span lines; an error the user sees is one."""
    return " ".join(str(exc).split())


def connect(path: Path, *, read_only: bool = False, wait_s: float = 120.0) -> duckdb.DuckDBPyConnection:
    """Open the database, waiting while another process holds the write lock.

    A file that cannot be opened or migrated (read-only, full disk, not a database) is a
    DatabaseError with one line; the run dir's results.json is then what keeps a run.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatabaseError(f"cannot open {path}: cannot create the folder {path.parent} "
                            f"({exc.strerror or exc})") from None
    existed = path.exists()
    deadline = time.monotonic() + wait_s
    delay = 0.1
    try:
        while True:
            try:
                con = duckdb.connect(str(path), read_only=read_only and existed)
                break
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise
                log.info("database %s is busy; retrying in %.1fs", path, delay)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        if not read_only:
            try:
                migrate(con)
            except duckdb.Error:
                con.close()
                raise
    except duckdb.Error as exc:
        if not existed:
            # A create that failed (full disk) leaves an empty file that every later open refuses as
            # "not a valid DuckDB database": remove only what this call created.
            for leftover in (path, path.with_name(path.name + ".wal")):
                with contextlib.suppress(OSError):  # a read-only disk has nothing to remove
                    leftover.unlink(missing_ok=True)
        raise DatabaseError(f"cannot open {path}: {one_line(exc)}") from None
    return con


def migrations() -> list[tuple[int, str, str]]:
    out = []
    for entry in sorted((sql_root() / "migrations").iterdir()):
        m = _MIGRATION.match(entry.name)
        if m:
            out.append((int(m.group(1)), entry.name, entry.read_text()))
    return out


def migrate(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Apply pending migrations, each in its own transaction, then re-create the views if a
    migration ran or a view file changed; returns the names of the migrations applied."""
    con.execute(load_sql("schema_migrations.sql"))
    done = {row[0] for row in con.execute(load_sql("migrations_applied.sql")).fetchall()}
    applied = []
    for version, name, text in migrations():
        if version in done:
            continue
        con.begin()
        try:
            con.execute(text)
            con.execute(load_sql("migration_record.sql"), {"version": version, "name": name})
            con.commit()
        except Exception:
            con.rollback()
            raise
        applied.append(name)
    # After a table change the views are created afresh over the new tables, rather than
    # relying on how a DuckDB version re-binds a view created over the old ones.
    if applied or stale_views(con):
        apply_views(con)
    return applied


def views() -> list[tuple[str, str]]:
    """(view name, its CREATE OR REPLACE VIEW text) for each file in sql/views/, in creation order."""
    found = []
    for entry in (sql_root() / "views").iterdir():
        m = _VIEW.match(entry.name)
        if m:
            found.append((int(m.group(1)), m.group(2), entry.read_text()))
    return [(name, text) for _, name, text in sorted(found)]


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def stale_views(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The views whose file text differs from the one the database holds; reads only, so a
    read-only connection can tell that its views are out of date."""
    try:
        held = dict(con.execute(load_sql("views_applied.sql")).fetchall())
    except duckdb.CatalogException:  # written before views had files: none is known current
        held = {}
    return [name for name, text in views() if held.get(name) != _sha256(text)]


def apply_views(con: duckdb.DuckDBPyConnection) -> None:
    """Re-create every view from its file, in order, in one transaction with the record of what
    the database now holds. A view whose file was removed stays until a migration drops it."""
    con.execute(load_sql("schema_views.sql"))
    con.begin()
    try:
        con.execute(load_sql("views_forget.sql"))
        for name, text in views():
            con.execute(text)
            con.execute(load_sql("view_record.sql"), {"name": name, "sha256": _sha256(text)})
        con.commit()
    except Exception:
        con.rollback()
        raise


def query_df(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | None = None) -> pd.DataFrame:
    return con.execute(sql, params or {}).df()


def append(con: duckdb.DuckDBPyConnection, table: str, frame: pd.DataFrame) -> None:
    if not frame.empty:
        con.append(table, frame, by_name=True)
