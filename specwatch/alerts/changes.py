"""Where a change began: its first-bad run. The same change is the same series, direction and first-bad
run, so this is what keeps one change to one alert however many nights show it.

The current streak of same-direction decisions on the comparison series bounds it: it starts after the
latest decided comparison that said otherwise. Inside that window, a change point in the candidate's history
series (the catalogue's trend metrics, specwatch/analysis/changepoints.py) that moves the same way places the
change earlier than the first decided A/B that caught it: the A/B confirms the change point.
The history is read as series_points holds it (the median over an arm's rounds per run).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb

from specwatch.alerts.decided import Decided, Direction
from specwatch.analysis.changepoints import change_points
from specwatch.analysis.metrics import METRICS
from specwatch.store import db


@dataclass(frozen=True)
class FirstBad:
    run_id: str
    started_at: datetime
    since: datetime | None  # the streak's boundary: the latest decision that said otherwise
    source: str  # 'a/b', or 'change point + a/b'


def _worse_or_better(direction: Direction, higher_is_better: bool, before: float, after: float) -> bool:
    up = after > before
    return up == higher_is_better if direction == "improvement" else up != higher_is_better


def _change_point_run(con: duckdb.DuckDBPyConnection, d: Decided, direction: Direction,
                      since: datetime | None) -> tuple[str, datetime] | None:
    """The earliest change point of the candidate's history series, in this direction, inside the streak."""
    metric = METRICS[d.metric]
    frame = db.query_df(con, db.load_sql("alerts/arm_history.sql"), {"run_id": d.run_id, "arm": d.candidate_arm})
    if metric.column not in frame:  # a metric the history's points do not hold has no change points
        return None
    found: list[tuple[datetime, str]] = []
    for _, series in frame[frame["arm"] == d.candidate_arm].groupby("series_key", sort=False):
        values = series[metric.column].astype(float).tolist()
        if any(v != v for v in values):  # a point without the metric: indices would not match the runs
            continue
        for cp in change_points(values):
            started = series["started_at"].iloc[cp.index].to_pydatetime()
            if _worse_or_better(direction, metric.higher_is_better, cp.before, cp.after) and \
                    (since is None or started > since) and started <= d.started_at:
                found.append((started, str(series["run_id"].iloc[cp.index])))
    if not found:
        return None
    started, run_id = min(found)
    return run_id, started


def first_bad(con: duckdb.DuckDBPyConnection, d: Decided, direction: Direction) -> FirstBad:
    """Call after `d` itself is stored in `decisions`."""
    key = {"series": d.series, "outcome": d.outcome, "started_at": d.started_at}
    other = con.execute(db.load_sql("alerts/last_other_decision.sql"), key).fetchone()
    since = other[1] if other else None
    start = con.execute(db.load_sql("alerts/streak_start.sql"), {**key, "since": since}).fetchone()
    run_id, started = start if start else (d.run_id, d.started_at)
    cp = _change_point_run(con, d, direction, since)
    if cp is not None and cp[1] < started:
        return FirstBad(cp[0], cp[1], since, "change point + a/b")
    return FirstBad(run_id, started, since, "a/b")
