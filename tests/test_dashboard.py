"""The dashboard in a real browser (Debian's chromium, no network): a history with a planted regression (the
candidate slows down 1.3x at night 7, the nightly's A/B decides REVERT at night 9), its alert found and
acknowledged through the page and checked in DuckDB; trend, compare and report pages drawn from the vendored
scripts only; the notification reaches a local webhook that is down first and up later; a page says so when
another process holds the database."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import httpx
import pytest

from specwatch.alerts.opening import record
from specwatch.engine.launchers import free_port
from specwatch.store import db
from specwatch.store import history as hist
from specwatch_testing.alerts import decided, planted_history, run_id
from specwatch_testing.browser import screenshot
from specwatch_testing.cli import descendants, specwatch, start_specwatch, stop_tree
from specwatch_testing.records import query
from specwatch_testing.webhook import webhook_receiver


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    home = tmp_path_factory.mktemp("dashboard")
    path = home / "h.duckdb"
    planted_history(path)
    con = db.connect(path)
    try:
        record(con, [decided(3, "NO CHANGE", 0.0)])
        record(con, [decided(9, "REVERT", -0.23)])
        frame = hist.points(con)
    finally:
        con.close()
    # the first-bad run's report and a plot, where the flow writes them
    folder = home / "runs" / run_id(7)
    folder.mkdir(parents=True)
    (folder / "report.md").write_text("# nightly\n\n## Conclusion\nREVERT: k5 decode tok/s -23%\n")
    hist.plot(frame, hist.summarize(frame)[0], folder)
    port = free_port()
    proc = start_specwatch(["dashboard", "--db", str(path), "--port", str(port)], home, "SIGTERM stops it",
                           timeout_s=60)
    try:
        yield f"http://127.0.0.1:{port}", path, home
    finally:
        stop_tree(proc, descendants(proc.pid))


@pytest.fixture
def page(browser, served):  # type: ignore[no-untyped-def]
    """A page that may reach the dashboard only: any other request is aborted and recorded."""
    base = served[0]
    p = browser.new_page(viewport={"width": 1280, "height": 900})
    p.outside = []

    def route(r) -> None:  # type: ignore[no-untyped-def]
        if r.request.url.startswith(base):
            r.continue_()
        else:
            p.outside.append(r.request.url)
            r.abort()

    p.route("**/*", route)
    yield p
    assert p.outside == [], f"the page fetched from outside the dashboard: {p.outside}"
    p.close()


def test_the_planted_regression_is_found_and_acknowledged_through_the_page(served, page) -> None:
    base, path, _ = served
    page.goto(base + "/")
    row = page.locator("tr", has_text="REVERT nightly: k5 vs k3")
    row.wait_for(timeout=10000)
    assert "untriaged" in row.inner_text() and "run-07" in row.inner_text()  # placed by the change point
    screenshot(page, "dashboard-alerts")
    row.get_by_role("link", name="#1").click()
    page.get_by_text("change point + a/b").wait_for()
    page.select_option("select[name=state]", "acknowledged")
    page.fill("input[name=note]", "bisecting the k5 drafter change")
    page.fill("input[name=by]", "ana")
    page.get_by_role("button", name="save").click()
    page.locator("#state", has_text="acknowledged").wait_for(timeout=10000)
    assert "bisecting the k5 drafter change" in page.inner_text("body")
    screenshot(page, "dashboard-alert-acknowledged")
    # the page wrote it: the dashboard holds no connection between requests, so this process may read the file
    assert query(path, "select state from alerts") == [("acknowledged",)]
    assert query(path, "select changed_by, note from alert_events where state = 'acknowledged'") == [
        ("ana", "bisecting the k5 drafter change")]


def test_a_bad_triage_through_the_dashboard_is_one_line_and_changes_nothing(served) -> None:
    base, path, _ = served
    before = query(path, "select state, updated_at from alerts")
    resp = httpx.post(f"{base}/alerts/1/triage", data={"state": "acked", "note": "", "by": "ana"})
    assert resp.status_code == 400
    assert "state &#x27;acked&#x27; is not a triage state; use one of untriaged, acknowledged" in resp.text
    long = httpx.post(f"{base}/alerts/1/triage", data={"state": "fixed", "note": "x" * 2001, "by": "ana"})
    assert long.status_code == 400 and "note is 2,001 characters, over the cap of 2,000" in long.text
    assert httpx.post(f"{base}/alerts/42/triage", data={"state": "fixed"}).status_code == 404
    assert query(path, "select state, updated_at from alerts") == before


def _drawn(page, slot: str) -> int:  # type: ignore[no-untyped-def]
    """How many marks vega drew in a chart slot (0: the chart did not render)."""
    page.locator(f"#{slot} svg").first.wait_for(timeout=15000)
    return page.locator(f"#{slot} svg path, #{slot} svg circle, #{slot} svg line").count()


def test_the_trend_marks_the_change_point_and_the_alert(served, page) -> None:
    base, path, _ = served
    ((key,),) = query(path, "select series_key from series where k = 5 and concurrency = 1 and prompt_class = 'code'")
    page.goto(base + "/series")
    page.get_by_role("link", name=key[:12]).click()
    assert _drawn(page, "trend") > 20
    text = page.inner_text("body")
    assert "run-07" in text and "#1 acknowledged" in text  # the circled first-bad run, in the flagged table
    assert page.locator("#trend svg text", has_text="%").count() >= 1  # a change point's label, e.g. -23.1%
    screenshot(page, "dashboard-trend")


def test_the_compare_view_and_the_drill_down_to_the_report(served, page) -> None:
    base, _, _ = served
    page.goto(f"{base}/runs/{run_id(9)}")
    assert _drawn(page, "compare") > 4
    assert "REVERT" in page.inner_text("body") and "c4 prose" in page.inner_text("body")
    screenshot(page, "dashboard-compare")
    page.goto(f"{base}/alerts/1")
    page.get_by_role("link", name="first-bad run's report").click()
    page.get_by_text("## Conclusion").wait_for()
    img = page.locator("img").first
    img.wait_for()
    assert page.evaluate("document.images[0].complete && document.images[0].naturalWidth") > 100


def test_the_notification_reaches_a_webhook_that_was_down_first(served) -> None:
    _, path, home = served
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    down = specwatch("alerts", "deliver", "--url", url, "--format", "json", "--db", str(path), home=home)
    assert down.returncode == 0 and "0 sent, 1 kept for the next delivery" in down.stdout, down.stdout + down.stderr
    assert query(path, "select attempts, sent_at is null from outbox") == [(1, True)]
    with webhook_receiver(port) as receiver:
        up = specwatch("alerts", "deliver", "--url", url, "--format", "json", "--db", str(path), home=home)
    assert "1 sent, 0 kept" in up.stdout, up.stdout + up.stderr
    (got,) = receiver.received
    assert got["alert_id"] == 1 and got["event"] == "opened" and "REVERT nightly: k5 vs k3" in got["summary"]
    assert query(path, "select attempts, sent_at is not null from outbox") == [(2, True)]


def test_a_page_says_so_when_another_process_holds_the_database(served) -> None:
    base, path, _ = served
    writer = duckdb.connect(str(path))  # as the nightly's ingest would: a write connection in another process
    try:
        started = time.monotonic()
        resp = httpx.get(base + "/", timeout=30)
        waited = time.monotonic() - started
    finally:
        writer.close()
    assert resp.status_code == 503 and "the database is busy" in resp.text and "reloads itself" in resp.text
    assert 2.5 < waited < 10  # it waited briefly (3 s) before saying so
    assert httpx.get(base + "/", timeout=30).status_code == 200  # and answers once the file is free
