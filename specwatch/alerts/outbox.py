"""The outbox: every notification is written to DuckDB first, in the transaction that made it, and sent
from there. A target that is down leaves it pending with its attempts counted and the (redacted) error;
the next delivery, the next flow run's, sends it. A delivery never raises for a target that failed.

The write lock is not held while sending: pending rows are read on one short connection, sent, and the
outcomes written on another, so the dashboard and an ingest are never kept waiting on a slow target.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import httpx

from specwatch.alerts.messages import FORMATS, Format, body, links
from specwatch.alerts.states import AlertError
from specwatch.redact import redact_url, redact_urls
from specwatch.store import db

Send = Callable[[dict[str, Any]], None]  # raises when the target did not take it


def enqueue(con: duckdb.DuckDBPyConnection, alert_id: int | None, event: str, text: str, run_id: str,
            now: datetime) -> None:
    con.execute(db.load_sql("alerts/outbox_add.sql"), {"alert_id": alert_id, "event": event, "summary": text,
                                                       "links": json.dumps(links(alert_id, run_id)), "at": now})


def enqueue_run(path: Path, event: str, text: str, run_id: str) -> None:
    """A notification that is not an alert's (a run's regression hint), on a connection of its own."""
    con = db.connect(path)
    try:
        enqueue(con, None, event, text, run_id, datetime.now(UTC))
    finally:
        con.close()


@dataclass(frozen=True)
class Target:
    """Where notifications go: `name` is what is stored and shown (never a URL's secret part)."""

    name: str
    fmt: Format
    send: Send


def check_format(fmt: str) -> Format:
    if fmt not in FORMATS:
        raise AlertError(f"format {fmt!r} is not known; use one of {', '.join(FORMATS)}")
    return fmt


def url_target(url: str, fmt: str = "slack", timeout_s: float = 5.0) -> Target:
    """A webhook URL given directly (the CLI's --url): http(s) only."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in ("http", "https"):
        raise AlertError(f"webhook URL {redact_url(url)!r} is not http(s); give an http:// or https:// URL "
                         "(e.g. https://hooks.slack.com/services/...)")

    def send(payload: dict[str, Any]) -> None:
        httpx.post(url, json=payload, timeout=timeout_s).raise_for_status()

    return Target(redact_url(url), check_format(fmt), send)


@dataclass(frozen=True)
class Delivery:
    sent: int
    failed: int
    errors: list[str]  # one line per failed notification, redacted


def deliver(path: Path, target: Target) -> Delivery:
    """Send every pending notification to `target`, oldest first."""
    con = db.connect(path)
    try:
        pending = con.execute(db.load_sql("alerts/outbox_pending.sql")).fetchall()
    finally:
        con.close()
    outcomes: list[tuple[int, str | None, datetime]] = []
    for notification_id, alert_id, event, text, urls, _ in pending:
        try:
            target.send(body(target.fmt, event, alert_id, text, json.loads(urls)))
            error = None
        except Exception as exc:  # any failure of the target leaves it pending: a run never fails for it
            error = redact_urls(db.one_line(exc)) or type(exc).__name__
        outcomes.append((notification_id, error, datetime.now(UTC)))
    if not outcomes:
        return Delivery(0, 0, [])
    con = db.connect(path)
    try:
        con.begin()
        for notification_id, error, at in outcomes:
            if error is None:
                con.execute(db.load_sql("alerts/outbox_sent.sql"),
                            {"notification_id": notification_id, "at": at, "target": target.name})
            else:
                con.execute(db.load_sql("alerts/outbox_failed.sql"),
                            {"notification_id": notification_id, "at": at, "error": error})
        con.commit()
    finally:
        con.close()
    errors = [f"notification {n} to {target.name}: {e}" for n, e, _ in outcomes if e is not None]
    return Delivery(len(outcomes) - len(errors), len(errors), errors)
