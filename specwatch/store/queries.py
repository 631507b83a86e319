"""Named queries: the SQL files under `sql/queries/`, run with named parameters.

Each file starts with a header comment block::

    -- name: image-vs-image
    -- params: image_a, image_b, method=NULL, k=NULL
    -- One paragraph describing what the query returns ...

`name` equals the file name without `.sql`. A parameter without `=` is required; `p=VALUE`
is optional with that default, and `p=NULL` passes SQL NULL (the query then treats the
filter as off). Values always reach DuckDB as string parameters (`$p`), never formatted into
the SQL text; the SQL casts where it needs a number (`CAST($k AS INTEGER)`). An empty value
(`--param method=`) means the parameter's default.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from specwatch.store import db

QUERY_DIR = "queries"
NULL = "NULL"

_NAME = re.compile(r"^--\s*name:\s*(\S+)\s*$")
_PARAMS = re.compile(r"^--\s*params:(.*)$")
_PARAM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\s*=\s*(.*))?$")
_USED = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_COMMENT = re.compile(r"--[^\n]*")
_STRING = re.compile(r"'(?:[^']|'')*'")


class QueryError(Exception):
    """A named query that cannot run as asked; the message says how to fix the call."""


@dataclass(frozen=True)
class Param:
    name: str
    required: bool
    default: str | None = None  # None: SQL NULL (for optional parameters)

    def describe(self) -> str:
        if self.required:
            return self.name
        return f"{self.name}={NULL if self.default is None else self.default}"


@dataclass(frozen=True)
class NamedQuery:
    name: str
    params: tuple[Param, ...]
    description: str
    sql: str
    path: Path

    @property
    def required(self) -> list[str]:
        return [p.name for p in self.params if p.required]

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def usage(self) -> str:
        args = " ".join(f"--param {p.name}=VALUE" if p.required else f"[--param {p.name}=VALUE]" for p in self.params)
        return f"specwatch sql --name {self.name}" + (f" {args}" if args else "")


def parse(text: str, path: Path) -> NamedQuery:
    """Read a query file's header; raises QueryError naming the file and the broken line."""
    lines = text.splitlines()
    if not lines or not (m := _NAME.match(lines[0])):
        raise QueryError(f"{path}: the first line must be `-- name: {path.stem}`")
    name = m.group(1)
    if name != path.stem:
        raise QueryError(f"{path}: `-- name: {name}` differs from the file name; rename one to match")
    if len(lines) < 2 or not (m := _PARAMS.match(lines[1])):
        raise QueryError(f"{path}: the second line must be `-- params: a, b, c=default` (or `-- params:` for none)")
    params: list[Param] = []
    for item in filter(None, (s.strip() for s in m.group(1).split(","))):
        pm = _PARAM.match(item)
        if not pm:
            raise QueryError(f"{path}: parameter {item!r} is not `name` or `name=default`")
        default = pm.group(2)
        if default is None:
            params.append(Param(pm.group(1), required=True))
        else:
            default = default.strip()
            params.append(Param(pm.group(1), required=False, default=None if default.upper() == NULL else default))
    description = []
    for line in lines[2:]:
        if not line.startswith("--"):
            break
        description.append(line[2:].strip())
    body = _COMMENT.sub("", _STRING.sub("''", text))
    used = sorted(set(_USED.findall(body)))
    declared = [p.name for p in params]
    if sorted(set(declared)) != used or len(set(declared)) != len(declared):
        raise QueryError(
            f"{path}: `-- params:` declares {', '.join(declared) or 'nothing'} but the SQL uses "
            f"{', '.join('$' + u for u in used) or 'no parameters'}; make them the same"
        )
    return NamedQuery(name=name, params=tuple(params), description=" ".join(d for d in description if d),
                      sql=text, path=path)


def query_dir() -> Path:
    return db.sql_root() / QUERY_DIR


def named_queries() -> dict[str, NamedQuery]:
    """Every `sql/queries/*.sql`, by name."""
    out = {}
    for path in sorted(query_dir().glob("*.sql")):
        q = parse(path.read_text(), path)
        out[q.name] = q
    return out


def parse_param_args(items: list[str] | None) -> dict[str, str]:
    """`["image_a=0.27.0", "k=5"]` (repeated `--param k=v`) -> {"image_a": "0.27.0", "k": "5"}."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise QueryError(f"--param {item!r} is not NAME=VALUE (e.g. --param image_a=0.27.0)")
        if key in out:
            raise QueryError(f"--param {key} given twice ({out[key]!r} and {value!r}); pass it once")
        out[key] = value
    return out


def bind(query: NamedQuery, params: dict[str, str]) -> dict[str, str | None]:
    """The DuckDB parameter dict for `query`: checks names, fills defaults."""
    known = [p.name for p in query.params]
    unknown = [k for k in params if k not in known]
    if unknown:
        bad = unknown[0]
        close = difflib.get_close_matches(bad, known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise QueryError(
            f"query {query.name!r} has no parameter {bad!r}{hint}; its parameters: "
            f"{', '.join(p.describe() for p in query.params) or 'none'}"
        )
    values: dict[str, str | None] = {}
    for p in query.params:
        value = params.get(p.name)
        if value is not None and value.strip() == "":
            value = None
        if value is None:
            if p.required:
                raise QueryError(
                    f"query {query.name!r} needs parameter {p.name}: add --param {p.name}=VALUE "
                    f"(usage: {query.usage()})"
                )
            value = p.default
        values[p.name] = value
    return values


def _pending(con: duckdb.DuckDBPyConnection) -> tuple[list[str], list[str]]:
    """The migrations not applied and the views not current: what a read-write open adds."""
    try:
        done = {row[0] for row in con.execute(db.load_sql("migrations_applied.sql")).fetchall()}
    except duckdb.CatalogException:
        done = set()
    return [name for version, name, _ in db.migrations() if version not in done], db.stale_views(con)


def connect(path: Path) -> duckdb.DuckDBPyConnection:
    """A connection for named queries: read-only, unless the file still lacks a migration (a
    database written before migration 003 lacks the history) or holds views older than
    sql/views/; it is then opened read-write once, which adds them."""
    if not path.exists():
        raise QueryError(f"no database at {path}; run an experiment first or pass --db")
    con = db.connect(path, read_only=True)
    if any(_pending(con)):
        con.close()
        con = db.connect(path)  # applies the pending migrations and re-creates the views
    return con


def resolve(name: str, params: dict[str, str] | None = None) -> tuple[NamedQuery, dict[str, str | None]]:
    """The query and its DuckDB parameters; QueryError for an unknown name or parameter, or a
    missing one. Needs no database, so a CLI can check a call before opening the file."""
    known = named_queries()
    query = known.get(name)
    if query is None:
        close = difflib.get_close_matches(name, list(known), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise QueryError(f"unknown query {name!r}{hint}; known queries: {', '.join(known)} (files in {query_dir()})")
    return query, bind(query, params or {})


def run_named(con: duckdb.DuckDBPyConnection, name: str, params: dict[str, str] | None = None) -> pd.DataFrame:
    """Run the named query with `params` (strings) as DuckDB named parameters."""
    query, values = resolve(name, params)
    migrations, views = _pending(con)
    if migrations or views:
        lacks = [f"migration(s) {', '.join(migrations)}"] if migrations else []
        lacks += [f"the current text of view(s) {', '.join(views)}"] if views else []
        raise QueryError(
            f"the database lacks {' and '.join(lacks)} that query {name!r} reads; "
            "open it read-write once (specwatch.queries.connect or any ingest) to add them"
        )
    try:
        return con.execute(query.sql, values).df()
    except duckdb.ConversionException as exc:
        given = ", ".join(f"{k}={v!r}" for k, v in values.items() if v is not None)
        raise QueryError(f"query {name!r} cannot use the values given ({given}): {_first_line(exc)}") from None
    except duckdb.Error as exc:
        raise QueryError(f"query {name!r} failed: {_first_line(exc)}") from None


def _first_line(exc: Exception) -> str:
    # DuckDB appends a "LINE n:" excerpt of the SQL: noise for someone passing --param values
    return str(exc).strip().splitlines()[0]


def _param_doc(p: Param) -> str:
    if p.required:
        return p.name
    if p.default is None:
        return f"{p.name} (optional, default: no filter)"
    return f"{p.name} (optional, default {p.default})"


def catalogue() -> str:
    """One block per query (name, usage, description): for `specwatch sql --list`."""
    blocks = []
    for q in named_queries().values():
        params = ", ".join(_param_doc(p) for p in q.params)
        blocks.append(f"{q.name}\n  usage: {q.usage()}\n  params: {params or 'none'}\n  {q.description}")
    return "\n\n".join(blocks)
