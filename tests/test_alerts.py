"""Alerts from decided comparisons: one alert per change (series, direction, first-bad run), counted on
later nights, never reopened once invalid, verified or reopened by the next decided comparison after a
fix, placed at a history change point that the A/B confirms; and the outbox that survives a target that is
down."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from specwatch.alerts import outbox
from specwatch.alerts.opening import AlertChange, record
from specwatch.alerts.states import AlertError, default_user
from specwatch.alerts.triage import set_state
from specwatch.engine.launchers import free_port
from specwatch.store import db
from specwatch_testing import records
from specwatch_testing.alerts import decided, planted_history
from specwatch_testing.webhook import webhook_receiver


@pytest.fixture
def con(tmp_path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    c = db.connect(tmp_path / "h.duckdb")
    yield c
    c.close()


@pytest.fixture
def one_alert(tmp_path: Path) -> tuple[Path, AlertChange]:
    """A database with one REVERT recorded: alert #1, untriaged, its notification pending."""
    path = tmp_path / "h.duckdb"
    c = db.connect(path)
    try:
        (opened,) = record(c, [decided(1, "REVERT")])
    finally:
        c.close()
    return path, opened


def rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple]:
    return con.execute(sql).fetchall()


def test_a_revert_opens_one_alert_for_all_its_cells_and_later_nights_count_on_it(con) -> None:
    record(con, [decided(1, "NO CHANGE", 0.0)])
    assert rows(con, "select count(*) from alerts") == [(0,)]  # NO CHANGE decides nothing to alert on
    (opened,) = record(con, [decided(2, "REVERT")])
    assert opened.event == "opened"
    ((alert_id, state, first, runs, direction, cells_text, effect, summary),) = rows(
        con, "select alert_id, state, first_run_id, runs, direction, cells, effect, summary from alerts")
    assert (state, first, runs, direction) == ("untriaged", "run-02", 1, "regression")
    assert cells_text.count(";") == 3 and "c4 prose" in cells_text  # four cells, one alert
    assert effect == pytest.approx(-0.12) and "REVERT nightly: k5 vs k3" in summary and "[-15.0%, -9.0%]" in summary
    (counted,) = record(con, [decided(3, "REVERT"), ])
    assert counted.event == "counted" and counted.alert_id == alert_id
    assert rows(con, "select count(*), max(runs), max(last_run_id) from alerts") == [(1, 2, "run-03")]
    record(con, [decided(3, "REVERT")])  # the same run recorded again is not another night
    assert rows(con, "select runs from alerts") == [(2,)]
    # one notification for the change, none for the nights that only showed it again
    assert rows(con, "select alert_id, event from outbox") == [(alert_id, "opened")]
    link = json.loads(rows(con, "select links from outbox")[0][0])
    assert link["alert"].endswith(f"/alerts/{alert_id}") and link["run"].endswith("/runs/run-02")


def test_an_invalid_alert_never_reopens_for_the_same_change(con) -> None:
    (opened,) = record(con, [decided(1, "REVERT")])
    set_state(con, opened.alert_id, "invalid", by="ana", note="the host was throttled")
    (again,) = record(con, [decided(2, "REVERT")])
    assert again.event == "counted"
    assert rows(con, "select count(*), any_value(state), any_value(runs) from alerts") == [(1, "invalid", 2)]
    assert rows(con, "select count(*) from outbox") == [(1,)]
    # a NO CHANGE ends the change; a later REVERT is a new change with its own first-bad run
    record(con, [decided(3, "NO CHANGE", 0.0)])
    (new,) = record(con, [decided(4, "REVERT")])
    assert new.event == "opened" and new.alert_id != opened.alert_id
    assert rows(con, "select first_run_id, state from alerts order by alert_id") == [
        ("run-01", "invalid"), ("run-04", "untriaged")]


def test_a_fixed_alert_is_verified_by_a_no_change_and_reopened_by_another_revert(con) -> None:
    (a,) = record(con, [decided(1, "REVERT")])
    set_state(con, a.alert_id, "fixed", by="bo", note="reverted the kernel change")
    (still,) = [c for c in record(con, [decided(2, "REVERT", -0.10)]) if c.event != "counted"]
    assert still.event == "reopened"
    ((state,),) = rows(con, f"select state from alerts where alert_id = {a.alert_id}")
    (why,) = rows(con, f"select changed_by, note from alert_events where alert_id = {a.alert_id} "
                       "order by changed_at desc limit 1")
    assert state == "untriaged" and why[0] == "specwatch" and "run-02 after the fix still decided REVERT" in why[1]
    set_state(con, a.alert_id, "fixed", by="bo", note="this time for real")
    (verified,) = record(con, [decided(3, "NO CHANGE", 0.01)])
    assert verified.event == "verified"
    assert rows(con, f"select state from alerts where alert_id = {a.alert_id}") == [("verified",)]
    assert [e for (e,) in rows(con, "select event from outbox order by notification_id")] == \
        ["opened", "reopened", "verified"]
    history = rows(con, f"select state, changed_by from alert_events where alert_id = {a.alert_id} order by changed_at")
    assert history == [("untriaged", "specwatch"), ("fixed", "bo"), ("untriaged", "specwatch"), ("fixed", "bo"),
                       ("verified", "specwatch")]


def test_a_promote_opens_an_improvement_notice(con) -> None:
    (a,) = record(con, [decided(1, "PROMOTE", 0.2)])
    assert rows(con, "select direction, effect from alerts") == [("improvement", pytest.approx(0.2))]
    assert a.event == "opened"


def test_bad_triage_input_is_one_error_each(con) -> None:
    (a,) = record(con, [decided(1, "REVERT")])
    with pytest.raises(AlertError, match=r"alert id 999 does not exist"):
        set_state(con, 999, "acknowledged", by="ana")
    with pytest.raises(AlertError, match=r"state 'acked' is not a triage state; use one of untriaged, acknowledged"):
        set_state(con, a.alert_id, "acked", by="ana")
    with pytest.raises(AlertError, match=r"note is 2,001 characters, over the cap of 2,000"):
        set_state(con, a.alert_id, "acknowledged", by="ana", note="x" * 2001)
    with pytest.raises(AlertError, match=r"'verified' is set by the next decided comparison"):
        set_state(con, a.alert_id, "verified", by="ana")
    assert rows(con, "select state from alerts") == [("untriaged",)]  # nothing half-written


def test_a_history_change_point_places_the_change_that_the_ab_confirms(tmp_path: Path) -> None:
    """The candidate's history series drops at night 7; the A/B decides REVERT only from night 9 (a NO CHANGE
    on night 3): the alert's first-bad run is night 7's, from the change point."""
    path = tmp_path / "h.duckdb"
    planted_history(path)
    con = db.connect(path)
    try:
        record(con, [decided(3, "NO CHANGE", 0.0)])
        (a,) = record(con, [decided(9, "REVERT", -0.23)])
        assert rows(con, "select first_run_id, source from alerts") == [("run-07", "change point + a/b")]
        (b,) = record(con, [decided(10, "REVERT", -0.23)])
        assert b.event == "counted" and b.alert_id == a.alert_id
    finally:
        con.close()


def test_a_target_that_is_down_leaves_notifications_pending_until_it_is_up(one_alert) -> None:
    path, a = one_alert
    port = free_port()
    url = f"http://127.0.0.1:{port}/services/T0/B0/SECRETTOKEN"
    down = outbox.deliver(path, outbox.url_target(url, "json"))
    assert (down.sent, down.failed) == (0, 1)
    assert "SECRETTOKEN" not in down.errors[0] and f"127.0.0.1:{port}" in down.errors[0]
    with webhook_receiver(port) as receiver:
        up = outbox.deliver(path, outbox.url_target(url, "json"))
        again = outbox.deliver(path, outbox.url_target(url, "json"))
    assert (up.sent, up.failed, again.sent) == (1, 0, 0)  # sent once, never again
    (got,) = receiver.received
    assert got["alert_id"] == a.alert_id and got["event"] == "opened" and got["summary"].startswith("REVERT")
    assert got["links"]["alert"].endswith(f"/alerts/{a.alert_id}")
    ((attempts, sent_to, error, stored),) = records.query(path, "select attempts, sent_to, last_error, "
                                                                "sent_at is not null from outbox")
    assert (attempts, sent_to, error, stored) == (2, f"http://127.0.0.1:{port}/***", None, True)


def test_slack_format_carries_the_summary_as_text_and_the_links() -> None:
    from specwatch.alerts.messages import body

    slack = body("slack", "opened", 3, "REVERT x", {"alert": "http://h/alerts/3", "report": "/r/report.md"})
    assert slack["text"] == "alert #3 opened: REVERT x"
    assert "<http://h/alerts/3|alert>" in slack["blocks"][0]["text"]["text"]


def test_a_webhook_url_that_is_not_http_is_refused_without_showing_its_secret() -> None:
    with pytest.raises(AlertError, match=r"webhook URL 'ftp://hooks.example/\*\*\*' is not http\(s\)") as exc:
        outbox.url_target("ftp://hooks.example/T0/SECRET")
    assert "SECRET" not in str(exc.value)
    with pytest.raises(AlertError, match=r"format 'xml' is not known; use one of slack, json"):
        outbox.url_target("https://hooks.example/x", "xml")


@pytest.mark.parametrize("args, line", [
    (["ack", "999"], "error: alert id 999 does not exist; `specwatch alerts --all` lists the alerts"),
    (["ack", "x1"], "error: alert id 'x1' is not a number"),
    (["ack", "1", "--note", "n" * 2001], "error: note is 2,001 characters, over the cap of 2,000; shorten it"),
    (["set", "1", "acked"], "error: state 'acked' is not a triage state; use one of untriaged, acknowledged, "
                            "invalid, fixed, wontfix"),
    (["deliver", "--url", "file:///etc/T0KEN-hook"], "error: webhook URL 'file:///***' is not http(s); give an http:// "
                                                    "or https:// URL"),
])
def test_bad_alert_input_from_the_cli_is_one_line(one_alert, args: list[str], line: str) -> None:
    from typer.testing import CliRunner

    from cli.app import app

    path, _ = one_alert
    res = CliRunner().invoke(app, ["alerts", *args, "--db", str(path)])
    assert res.exit_code == 1 and "Traceback" not in res.output
    (shown,) = res.output.strip().splitlines()
    assert shown.startswith(line), shown
    assert "T0KEN" not in shown
    assert records.query(path, "select state from alerts") == [("untriaged",)]


def test_triage_from_the_cli_records_who_when_and_the_note(one_alert) -> None:
    from typer.testing import CliRunner

    from cli.app import app

    path, a = one_alert
    runner = CliRunner()
    assert runner.invoke(app, ["alerts", "set", str(a.alert_id), "wontfix", "--note", "accepted cost",
                               "--db", str(path)]).exit_code == 0
    listed = runner.invoke(app, ["alerts", "--db", str(path)])
    assert "0 alert(s)" in listed.output  # wontfix is closed
    every = runner.invoke(app, ["alerts", "--all", "--db", str(path)])
    assert "wontfix" in every.output and "1 alert(s)" in every.output
    shown = runner.invoke(app, ["alerts", "show", str(a.alert_id), "--db", str(path)])
    (event,) = [line for line in shown.output.splitlines() if "wontfix by" in line]
    assert event.endswith(f"wontfix by {default_user()}: accepted cost")
