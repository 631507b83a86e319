"""Recording what a run decided: its decisions are stored, the fixed alerts on its series are checked
(verified when the effect is gone, reopened untriaged with the reason when not), and a decided change
opens an alert, or counts one more run on the alert of the same change. Every notification goes to the
outbox in the same transaction.

An invalid alert is never reopened: the same change finds it and is only counted on it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import duckdb
import pandas as pd

from specwatch.alerts import outbox
from specwatch.alerts.changes import first_bad
from specwatch.alerts.decided import Decided, Direction
from specwatch.alerts.messages import cells_text, summary
from specwatch.alerts.states import SYSTEM
from specwatch.alerts.triage import write_state
from specwatch.store import db

Event = Literal["opened", "counted", "reopened", "verified"]
# the outcomes that show a fixed change gone: the effect's opposite or none
GONE: dict[str, tuple[str, ...]] = {"regression": ("NO CHANGE", "PROMOTE"), "improvement": ("NO CHANGE", "REVERT")}


@dataclass(frozen=True)
class AlertChange:
    alert_id: int
    event: Event
    text: str


def _store_decision(con: duckdb.DuckDBPyConnection, d: Decided, now: datetime) -> None:
    key = {"run_id": d.run_id, "candidate_arm": d.candidate_arm}
    con.execute(db.load_sql("alerts/delete_decisions.sql"), key)
    con.execute(db.load_sql("alerts/delete_decision_cells.sql"), key)
    row = {k: v for k, v in asdict(d).items() if k != "cells"}
    db.append(con, "decisions", pd.DataFrame([{**row, "decided_at": now}]))
    cells = [{**key, "cell": c.cell, "label": c.label, "metric": c.metric, "outcome": c.outcome,
              "before_value": c.before, "after_value": c.after, "estimate": c.estimate, "low": c.low, "high": c.high}
             for c in d.cells]
    db.append(con, "decision_cells", pd.DataFrame(cells))


def _check_fixed(con: duckdb.DuckDBPyConnection, d: Decided, now: datetime) -> list[AlertChange]:
    """The next decided comparison on a fixed alert's series says whether the fix held."""
    if d.outcome == "INCONCLUSIVE":
        return []
    out = []
    for alert_id, direction, text in con.execute(db.load_sql("alerts/fixed_on_series.sql"),
                                                 {"series": d.series}).fetchall():
        effect = f"{d.metric} {d.estimate:+.1%} [{d.low:+.1%}, {d.high:+.1%}]" if d.estimate is not None and \
            d.low is not None and d.high is not None else "no interval"
        if d.outcome in GONE[direction]:
            note = f"run {d.run_id} decided {d.outcome} ({effect}): the effect is gone"
            write_state(con, alert_id, "verified", SYSTEM, note, now)
            out.append(AlertChange(alert_id, "verified", f"verified by run {d.run_id}: {text}"))
        else:
            note = f"reopened: run {d.run_id} after the fix still decided {d.outcome} ({effect})"
            write_state(con, alert_id, "untriaged", SYSTEM, note, now)
            out.append(AlertChange(alert_id, "reopened", f"{note}: {text}"))
    return out


def _open_or_count(con: duckdb.DuckDBPyConnection, d: Decided, direction: Direction, now: datetime) -> AlertChange:
    start = first_bad(con, d, direction)
    found = con.execute(db.load_sql("alerts/alert_in_streak.sql"),
                        {"series": d.series, "direction": direction, "since": start.since}).fetchone()
    if found is not None:
        alert_id, _, _ = found
        con.execute(db.load_sql("alerts/attach_run.sql"), {"alert_id": alert_id, "run_id": d.run_id, "at": now})
        return AlertChange(alert_id, "counted", f"run {d.run_id} shows alert #{alert_id} again")
    cells = d.changed_cells
    lead = [c for c in cells if c.metric == d.metric and c.before is not None and c.after is not None]
    text = summary(d, start.run_id)
    (alert_id,) = con.execute(db.load_sql("alerts/insert_alert.sql"), {
        "series": d.series, "direction": direction, "first_run_id": start.run_id,
        "first_started_at": start.started_at, "last_run_id": d.run_id, "source": start.source,
        "baseline_arm": d.baseline_arm, "candidate_arm": d.candidate_arm, "metric": d.metric,
        "before_value": sum(c.before for c in lead) / len(lead) if lead else None,  # type: ignore[misc]
        "after_value": sum(c.after for c in lead) / len(lead) if lead else None,  # type: ignore[misc]
        "effect": d.estimate, "effect_low": d.low, "effect_high": d.high, "cells": cells_text(cells),
        "summary": text, "at": now}).fetchone()
    write_state(con, alert_id, "untriaged", SYSTEM, f"opened by run {d.run_id}", now)
    return AlertChange(alert_id, "opened", text)


def record(con: duckdb.DuckDBPyConnection, decided: list[Decided], now: datetime | None = None) -> list[AlertChange]:
    """Store the run's decisions and act on them, in one transaction; returns what changed."""
    now = now or datetime.now(UTC)
    changes: list[AlertChange] = []
    con.begin()
    try:
        for d in decided:
            _store_decision(con, d, now)
            made = _check_fixed(con, d, now)
            if d.direction is not None:
                made.append(_open_or_count(con, d, d.direction, now))
            for c in made:
                if c.event != "counted":
                    outbox.enqueue(con, c.alert_id, c.event, c.text, d.run_id, now)
            changes += made
        con.commit()
    except BaseException:
        con.rollback()
        raise
    return changes


def record_run(path: Path, decided: list[Decided]) -> list[AlertChange]:
    """`record` on the database at `path`, with a write connection held only for it."""
    con = db.connect(path)
    try:
        return record(con, decided)
    finally:
        con.close()
