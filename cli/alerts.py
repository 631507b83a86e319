"""`specwatch alerts`: list, show and triage alerts, and send the outbox to a webhook URL by hand."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, TypeVar

import duckdb
import typer
from rich.table import Table

from cli.common import DbOption, existing_db, fail, out
from specwatch.alerts.states import NOTE_CAP, SETTABLE, AlertError, default_user

app = typer.Typer(add_completion=False, help="Alerts on decided changes: list them, triage them, send the outbox.")
T = TypeVar("T")

NoteOption = Annotated[str, typer.Option("--note", help=f"why (up to {NOTE_CAP:,} characters)")]
ByOption = Annotated[str | None, typer.Option("--by", help="who triages (default: the OS user)")]


def _id(text: str) -> int:
    if not text.isdigit():
        raise fail(f"alert id {text!r} is not a number; `specwatch alerts --all` lists the alerts with their ids")
    return int(text)


@contextmanager
def _connection(db: Path | None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A write connection for the command's few statements (the migrations that add the alert tables run
    on it), and every AlertError as one line."""
    from specwatch.store.db import DatabaseError, connect

    try:
        con = connect(existing_db(db), wait_s=10.0)
    except DatabaseError as exc:
        raise fail(str(exc)) from None
    try:
        yield con
    except AlertError as exc:
        raise fail(str(exc)) from None
    finally:
        con.close()


def _guarded(call: Callable[[], T]) -> T:
    try:
        return call()
    except AlertError as exc:
        raise fail(str(exc)) from None


@app.callback(invoke_without_command=True)
def alerts(ctx: typer.Context, db: DbOption = None,
           show_all: Annotated[bool, typer.Option("--all", help="closed ones too (invalid, verified, wontfix)")]
           = False) -> None:
    """The open alerts, newest first (`specwatch alerts --all`: every one)."""
    if ctx.invoked_subcommand is not None:
        return
    from specwatch.alerts.triage import alerts as listed

    with _connection(db) as con:
        frame = listed(con, open_only=not show_all)
    table = Table(title="alerts" if show_all else "open alerts")
    for col in ("id", "state", "direction", "summary", "runs", "updated"):
        table.add_column(col, overflow="fold")
    for r in frame.itertuples(index=False):
        table.add_row(str(r.alert_id), r.state, r.direction, r.summary, str(r.runs), str(r.updated_at)[:16])
    out.print(table)
    out.print(f"{len(frame)} alert(s)")


@app.command()
def show(alert_id: Annotated[str, typer.Argument(metavar="ID")], db: DbOption = None) -> None:
    """One alert: what changed, where, since which run, and every change of its state."""
    from specwatch.alerts.triage import alert, events

    number = _id(alert_id)
    with _connection(db) as con:
        row = alert(con, number)
        history = events(con, number)
    for name in ("alert_id", "state", "direction", "series", "summary", "first_run_id", "last_run_id", "runs",
                 "source", "cells"):
        out.print(f"{name}: {row[name]}", highlight=False, markup=False)
    for e in history.itertuples(index=False):
        out.print(f"  {str(e.changed_at)[:19]} {e.state} by {e.changed_by}" + (f": {e.note}" if e.note else ""),
                  highlight=False, markup=False)


def _triage(alert_id: str, state: str, note: str, by: str | None, db: Path | None) -> None:
    from specwatch.alerts.triage import set_state

    number = _id(alert_id)
    with _connection(db) as con:
        set_state(con, number, state, by or default_user(), note)
    out.print(f"alert #{number}: {state}", highlight=False)


@app.command()
def ack(alert_id: Annotated[str, typer.Argument(metavar="ID")], note: NoteOption = "", by: ByOption = None,
        db: DbOption = None) -> None:
    """Acknowledge an alert: someone is on it."""
    _triage(alert_id, "acknowledged", note, by, db)


@app.command("set")
def set_command(alert_id: Annotated[str, typer.Argument(metavar="ID")],
                state: Annotated[str, typer.Argument(help=", ".join(SETTABLE))],
                note: NoteOption = "", by: ByOption = None, db: DbOption = None) -> None:
    """Move an alert to a triage state (fixed: the next decided comparison verifies it, or reopens it)."""
    _triage(alert_id, state, note, by, db)


@app.command()
def deliver(url: Annotated[str, typer.Option("--url", help="webhook URL (http or https)")],
            fmt: Annotated[str, typer.Option("--format", help="slack or json")] = "slack",
            db: DbOption = None) -> None:
    """Send the pending notifications to a webhook URL (the flows send them through a Prefect block)."""
    from specwatch.alerts.outbox import deliver as send
    from specwatch.alerts.outbox import url_target
    from specwatch.store.db import DatabaseError

    target = _guarded(lambda: url_target(url, fmt))
    try:
        done = send(existing_db(db), target)
    except DatabaseError as exc:
        raise fail(str(exc)) from None
    for line in done.errors:
        out.print(f"kept in the outbox: {line}", highlight=False, markup=False)
    out.print(f"{done.sent} sent, {done.failed} kept for the next delivery", highlight=False)
