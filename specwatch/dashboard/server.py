"""`specwatch dashboard`: a small HTTP server over the history, in this process only (it starts nothing).

DuckDB lets one process hold a write connection, and that blocks every other process, readers included.
So the dashboard holds no connection between requests: each request opens a short one (read-only for pages,
read-write for a triage write, one short transaction) and closes it. While another process (the nightly's
ingest) holds the file, a request waits up to `lock_wait_s` and then answers 503 with a page that says so
and reloads itself. One request touches the database at a time: DuckDB connects from several threads of one
process at once sometimes fail ("Unique file handle conflict").
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import duckdb

from specwatch.alerts.states import AlertError, default_user
from specwatch.alerts.triage import set_state
from specwatch.dashboard import pages
from specwatch.dashboard.html import VENDOR, page, text
from specwatch.store import db

LOCK_WAIT_S = 3.0
BUSY_RELOAD_S = 5
_DB_LOCK = threading.Lock()
_PNG = re.compile(r"^[\w.-]+\.png$")


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    location: str | None = None


def _html(status: int, html: str) -> Reply:
    return Reply(status, html.encode())


def _vendor(name: str) -> Reply:
    data = (resources.files("specwatch.dashboard") / "vendor" / name).read_bytes()
    return Reply(200, data, "text/javascript; charset=utf-8")


class Dashboard:
    def __init__(self, db_path: Path, lock_wait_s: float = LOCK_WAIT_S) -> None:
        self.db_path = db_path
        self.lock_wait_s = lock_wait_s

    def prepare(self) -> None:
        """Once at start: the file exists, and holds the tables and views the pages read (a read-write open
        applies pending migrations; every request after it may then be read-only)."""
        if not self.db_path.exists():
            raise db.DatabaseError(f"no database at {self.db_path}; run an experiment first or pass --db")
        db.connect(self.db_path).close()

    def _with_db(self, read_only: bool, work: Callable[[duckdb.DuckDBPyConnection], Reply]) -> Reply:
        with _DB_LOCK:
            try:
                con = db.connect(self.db_path, read_only=read_only, wait_s=self.lock_wait_s)
            except db.DatabaseError as exc:
                if "lock" not in str(exc).lower():
                    raise
                return _html(503, page("the database is busy", (
                    f"<p class='error'>Another process holds {text(self.db_path)} (the nightly's ingest, a run or a "
                    f"CLI command writing to it). This page waited {self.lock_wait_s:g} s; it reloads itself in "
                    f"{BUSY_RELOAD_S} s.</p>"), refresh_s=BUSY_RELOAD_S))
            try:
                return work(con)
            finally:
                con.close()

    def get(self, path: str, query: dict[str, list[str]]) -> Reply:
        parts = [unquote(p) for p in path.strip("/").split("/") if p]
        match parts:
            case []:
                return self._with_db(True, lambda con: _html(200, pages.alert_list(con, "all" in query)))
            case ["alerts", alert_id] if alert_id.isdigit():
                return self._with_db(True, lambda con: _html(200, pages.alert_page(con, int(alert_id))))
            case ["series"]:
                return self._with_db(True, lambda con: _html(200, pages.series_list(con)))
            case ["series", key]:
                return self._with_db(True, lambda con: _html(200, pages.series_page(con, key)))
            case ["runs"]:
                return self._with_db(True, lambda con: _html(200, pages.run_list(con)))
            case ["runs", run_id]:
                return self._with_db(True, lambda con: _html(200, pages.run_page(con, run_id)))
            case ["runs", run_id, "report"]:
                return _html(200, pages.report_page(run_id))
            case ["runs", run_id, "files", name] if _PNG.match(name):
                return Reply(200, (pages.run_dir(run_id) / name).read_bytes(), "image/png")
            case ["static", name] if name in VENDOR:
                return _vendor(name)
        raise pages.NotFound(f"no page {path}")

    def post(self, path: str, form: dict[str, list[str]]) -> Reply:
        parts = path.strip("/").split("/")
        if len(parts) != 3 or parts[0] != "alerts" or not parts[1].isdigit() or parts[2] != "triage":
            raise pages.NotFound(f"no form at {path}")
        alert_id = int(parts[1])

        def field(name: str) -> str:
            return form.get(name, [""])[0]

        def triage(con: duckdb.DuckDBPyConnection) -> Reply:
            try:
                set_state(con, alert_id, field("state"), field("by") or default_user(), field("note"))
            except AlertError as exc:
                return _html(400, pages.alert_page(con, alert_id, error=str(exc)))
            return Reply(303, b"", location=f"/alerts/{alert_id}")

        return self._with_db(False, triage)


def handler(dashboard: Dashboard) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, make: Callable[[], Reply]) -> None:
            try:
                reply = make()
            except pages.NotFound as exc:
                reply = _html(404, page("not found", f"<p class='error'>{text(exc)}</p>"))
            except Exception as exc:  # a page that broke is one line on a page, and the server goes on
                reply = _html(500, page("error", f"<p class='error'>{text(db.one_line(exc))}</p>"))
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            if reply.location:
                self.send_header("Location", reply.location)
            self.end_headers()
            self.wfile.write(reply.body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            url = urlsplit(self.path)
            self._answer(lambda: dashboard.get(url.path, parse_qs(url.query)))

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length") or 0)
            form = parse_qs(self.rfile.read(length).decode(), keep_blank_values=True)
            self._answer(lambda: dashboard.post(urlsplit(self.path).path, form))

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            pass

    return Handler


def make_server(dashboard: Dashboard, host: str, port: int) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, port), handler(dashboard))
    server.daemon_threads = True
    return server

