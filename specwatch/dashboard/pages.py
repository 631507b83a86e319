"""The dashboard's pages: each reads what it shows on the request's short connection (sql/dashboard/,
sql/alerts/) and returns its HTML."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import duckdb
import pandas as pd

from specwatch import paths
from specwatch.alerts.states import NOTE_CAP, SETTABLE, AlertError, default_user
from specwatch.alerts.triage import alert, alerts, events
from specwatch.dashboard import charts
from specwatch.dashboard.html import chart, link, num, page, pct, table, text
from specwatch.store import db


class NotFound(Exception):
    pass


def _sql(con: duckdb.DuckDBPyConnection, name: str, **params: Any) -> pd.DataFrame:
    return db.query_df(con, db.load_sql(f"dashboard/{name}.sql"), params)


def _one(con: duckdb.DuckDBPyConnection, name: str, what: str, **params: Any) -> Any:
    """The one row a page is about; NotFound (404) naming `what` when there is none."""
    frame = _sql(con, name, **params)
    if frame.empty:
        raise NotFound(f"no {what}")
    return frame.iloc[0]


def _run_link(run_id: object) -> str:
    return link(f"/runs/{quote(str(run_id))}", str(run_id))


def alert_list(con: duckdb.DuckDBPyConnection, show_all: bool) -> str:
    frame = alerts(con, open_only=not show_all)
    body = (f"<p>{link('/?all=1', 'show closed ones too') if not show_all else link('/', 'open only')}</p>"
            + table(frame, ["alert_id", "state", "direction", "summary", "first_run_id", "runs", "updated_at"], {
                "alert_id": lambda r: link(f"/alerts/{r.alert_id}", f"#{r.alert_id}"),
                "state": lambda r: f"<span class='{text(r.state)}'>{text(r.state)}</span>",
                "first_run_id": lambda r: _run_link(r.first_run_id),
                "updated_at": lambda r: text(str(r.updated_at)[:16])},
                row_class=lambda r: str(r.direction), empty="no alerts"))
    return page("all alerts" if show_all else "open alerts", body)


def alert_page(con: duckdb.DuckDBPyConnection, alert_id: int, error: str | None = None) -> str:
    try:
        a = alert(con, alert_id)
    except AlertError:
        raise NotFound(f"alert #{alert_id} does not exist") from None
    facts = "".join(f"<tr><th>{name}</th><td>{value}</td></tr>" for name, value in (
        ("state", f"<span id='state' class='{text(a['state'])}'>{text(a['state'])}</span>"),
        ("direction", text(a["direction"])), ("series", text(a["series"])),
        ("effect", f"{text(a['metric'])} {pct(a['effect'])} [{pct(a['effect_low'])}, {pct(a['effect_high'])}]"),
        ("before → after", f"{num(a['before_value'])} → {num(a['after_value'])}"),
        ("cells", text(a["cells"])), ("first-bad run", _run_link(a["first_run_id"])),
        ("latest run", _run_link(a["last_run_id"])), ("runs showing it", text(a["runs"])),
        ("placed by", text(a["source"])),
        ("report", link(f"/runs/{quote(str(a['first_run_id']))}/report", "first-bad run's report"))))
    options = "".join(f"<option value='{s}'{' selected' if s == 'acknowledged' else ''}>{s}</option>"
                      for s in SETTABLE)
    form = (f"<form class='triage' method='post' action='/alerts/{alert_id}/triage'>"
            f"<label>state <select name='state'>{options}</select></label>"
            f"<label>note <input name='note' size='50' maxlength='{NOTE_CAP}'></label>"
            f"<label>by <input name='by' size='12' value='{text(default_user())}'></label>"
            "<button type='submit'>save</button></form>")
    shown_error = f"<p class='error'>{text(error)}</p>" if error else ""
    body = (f"<p>{text(a['summary'])}</p><table>{facts}</table>{shown_error}{form}<h2>history</h2>"
            + table(events(con, alert_id), ["changed_at", "state", "changed_by", "note"],
                    {"changed_at": lambda r: text(str(r.changed_at)[:19])}))
    return page(f"alert #{alert_id}: {a['direction']}", body)


def series_list(con: duckdb.DuckDBPyConnection) -> str:
    frame = _sql(con, "series")
    body = table(frame, ["series_key", "open_alerts", "model", "method", "k", "load_level", "prompt_class",
                         "host_class", "runs", "last_vllm_version", "last_decode_tok_s", "last_at"], {
        "series_key": lambda r: link(f"/series/{r.series_key}", str(r.series_key)[:12]),
        "last_decode_tok_s": lambda r: num(r.last_decode_tok_s),
        "last_at": lambda r: text(str(r.last_at)[:16])}, empty="no history yet")
    return page(f"{len(frame)} series", body)


def series_page(con: duckdb.DuckDBPyConnection, key: str) -> str:
    points = _sql(con, "trend", series_key=key)
    if points.empty:
        raise NotFound(f"no series {key!r}")
    s = points.iloc[0]
    title = (f"{s.model} {s.method} k={s.k} {s.load_level} {s.prompt_class} {s.prompt_tokens}/{s.max_tokens} "
             f"on {s.host_class}")
    flagged = points[points["regression_flagged"] | points["alerts"].notna()]
    body = (chart("trend", charts.trend(points))
            + "<p class='muted'>dashed: change points · circled: an alert's first-bad run · "
              "<span class='hint'>triangle: the run's checks flagged it (a hint, not an alert)</span></p>"
            + "<h2>flagged points</h2>"
            + table(flagged, ["started_at", "run_id", "vllm_version", "decode_tok_s_median", "regression_flagged",
                              "alerts"], {"run_id": lambda r: _run_link(r.run_id),
                                          "decode_tok_s_median": lambda r: num(r.decode_tok_s_median),
                                          "started_at": lambda r: text(str(r.started_at)[:16])}))
    return page(title, body)


def run_list(con: duckdb.DuckDBPyConnection) -> str:
    frame = _sql(con, "runs", limit=200)
    body = table(frame, ["run_id", "experiment_name", "started_at", "decided", "regression_flagged", "exit_code"], {
        "run_id": lambda r: _run_link(r.run_id), "started_at": lambda r: text(str(r.started_at)[:16]),
        "regression_flagged": lambda r: "<span class='hint'>hint: flagged</span>" if r.regression_flagged else ""})
    return page("latest runs", body)


def run_page(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    r = _one(con, "run", f"run {run_id!r}", run_id=run_id)
    decided = _sql(con, "run_decisions", run_id=run_id)
    cells = _sql(con, "run_decision_cells", run_id=run_id)
    if cells.empty:
        compare = chart("arms", charts.arms(_sql(con, "run_cells", run_id=run_id)))
    else:
        compare = chart("compare", charts.compare(cells)) + table(
            cells, ["candidate_arm", "label", "metric", "outcome", "before_value", "after_value", "estimate", "low",
                    "high"], {"before_value": lambda c: num(c.before_value, ".3f"),
                              "after_value": lambda c: num(c.after_value, ".3f"), "estimate": lambda c: pct(c.estimate),
                              "low": lambda c: pct(c.low), "high": lambda c: pct(c.high)})
    body = (f"<p>{text(r.experiment_name)} · started {text(str(r.started_at)[:16])} · exit code {text(r.exit_code)}"
            f"{' · partial' if r.partial else ''} · {link(f'/runs/{quote(run_id)}/report', 'report and plots')}</p>"
            + "<h2>decision</h2>"
            + table(decided, ["candidate_arm", "baseline_arm", "outcome", "metric", "estimate", "low", "high", "rounds",
                              "reason"], {"estimate": lambda d: pct(d.estimate), "low": lambda d: pct(d.low),
                                          "high": lambda d: pct(d.high)}, empty="no decided comparison")
            + "<h2>alerts</h2>"
            + table(_sql(con, "run_alerts", run_id=run_id), ["alert_id", "state", "summary"],
                    {"alert_id": lambda a: link(f"/alerts/{a.alert_id}", f"#{a.alert_id}")}, empty="none")
            + "<h2>compare: baseline vs candidate per cell</h2>" + compare
            + "<h2 class='hint'>hints: failed regression checks</h2>"
            + table(_sql(con, "run_flags", run_id=run_id), ["arm", "concurrency", "prompt_class", "check", "detail"],
                    empty="none"))
    return page(f"run {run_id}", body)


def run_dir(run_id: str) -> Path:
    folder = (paths.runs_dir() / run_id).resolve()
    if folder.parent != paths.runs_dir().resolve() or not folder.is_dir():
        raise NotFound(f"no run dir for {run_id!r} under {paths.runs_dir()}")
    return folder


def report_page(run_id: str) -> str:
    """The run's report as written (markdown text) and its plots; from the run dir, not the database."""
    folder = run_dir(run_id)
    report = folder / "report.md"
    shown = f"<pre>{text(report.read_text())}</pre>" if report.is_file() else "<p class='muted'>no report.md</p>"
    plots = "".join(f"<h2>{text(p.name)}</h2><img src='/runs/{quote(run_id)}/files/{quote(p.name)}' "
                    f"alt='{text(p.name)}'>" for p in sorted(folder.glob("*.png")))
    return page(f"report of run {run_id}", f"<p>{_run_link(run_id)}</p>{plots}{shown}")
