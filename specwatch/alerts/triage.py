"""Triage by people, from the CLI and the dashboard alike: each change of state is one short write
transaction that records who, when and the note."""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb
import pandas as pd

from specwatch.alerts.states import AlertError, State, check_note, check_state
from specwatch.store import db


def alert(con: duckdb.DuckDBPyConnection, alert_id: int) -> dict[str, object]:
    """One alert's row; an unknown id is an AlertError naming it."""
    frame = db.query_df(con, db.load_sql("alerts/alert.sql"), {"alert_id": alert_id})
    if frame.empty:
        raise AlertError(f"alert id {alert_id} does not exist; `specwatch alerts --all` lists the alerts")
    return frame.iloc[0].to_dict()


def events(con: duckdb.DuckDBPyConnection, alert_id: int) -> pd.DataFrame:
    return db.query_df(con, db.load_sql("alerts/events.sql"), {"alert_id": alert_id})


def alerts(con: duckdb.DuckDBPyConnection, open_only: bool = True, limit: int = 200) -> pd.DataFrame:
    return db.query_df(con, db.load_sql("alerts/list.sql"), {"open_only": open_only, "limit": limit})


def write_state(con: duckdb.DuckDBPyConnection, alert_id: int, state: str, by: str, note: str | None,
                now: datetime) -> None:
    """The state and its event, inside the caller's transaction."""
    con.execute(db.load_sql("alerts/set_state.sql"), {"alert_id": alert_id, "state": state, "at": now})
    con.execute(db.load_sql("alerts/add_event.sql"),
                {"alert_id": alert_id, "state": state, "by": by, "at": now, "note": note})


def set_state(con: duckdb.DuckDBPyConnection, alert_id: int, state: str, by: str, note: str = "") -> State:
    """Move an alert to `state`: checks first (state, note, id), then one transaction."""
    checked = check_state(state)
    check_note(note)
    if not by.strip():
        raise AlertError("--by is empty; name who triages (default: the OS user)")
    now = datetime.now(UTC)
    con.begin()
    try:
        alert(con, alert_id)
        write_state(con, alert_id, checked, by, note or None, now)
        con.commit()
    except BaseException:
        con.rollback()
        raise
    return checked
