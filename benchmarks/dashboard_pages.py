"""How fast every dashboard page answers on the scale history (issue 25: within 1 s on 10M requests).

Builds the year of nightly runs of `history_scale.py` (365 runs, 10.1 M request rows) unless `--db` names
one already built, records a decided k5-vs-k3 comparison for every night so that the alert pages have
alerts (the verdict is not re-run on synthetic rows: each night's estimate is the mean over its cells of
k5/k3 - 1 from the stored medians, with a +-3% interval and the 5% band), then starts `specwatch dashboard`
as a user does (its own process, a short DuckDB connection per request) and times each page over HTTP.
Prints a table; nothing asserts.

    .venv/bin/python benchmarks/dashboard_pages.py                      # builds the history (minutes)
    .venv/bin/python benchmarks/dashboard_pages.py --db /tmp/history.duckdb --repeat 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from specwatch.alerts.decided import Decided, DecidedCell, Outcome, series_name  # noqa: E402
from specwatch.alerts.opening import record  # noqa: E402
from specwatch.analysis.decision import classify  # noqa: E402
from specwatch.analysis.intervals import DiffCI  # noqa: E402
from specwatch.engine.launchers import free_port  # noqa: E402
from specwatch.store import db  # noqa: E402
from specwatch_testing.cli import descendants, start_specwatch, stop_tree  # noqa: E402

BAND, HALF_WIDTH = 0.05, 0.03


def outcome(est: float) -> Outcome:
    """The decision's word for an interval of +-HALF_WIDTH around `est` (decode tok/s: higher is better)."""
    cell = classify(DiffCI(est, est - HALF_WIDTH, est + HALF_WIDTH, 3, "synthetic", 0.9), BAND)
    return {"gain": "PROMOTE", "regression": "REVERT", "flat": "NO CHANGE"}.get(cell, "INCONCLUSIVE")  # type: ignore[return-value]


def nightly_decision(con, run_id: str, started: datetime) -> Decided:  # type: ignore[no-untyped-def]
    cells = db.query_df(con, db.load_sql("dashboard/run_cells.sql"), {"run_id": run_id})
    by = {arm: g.set_index(["concurrency", "prompt_class"])["decode_tok_s"] for arm, g in cells.groupby("arm")}
    ratios = (by["k5"] / by["k3"] - 1).dropna()
    est = float(ratios.mean())
    decided = outcome(est)
    cell_outcome = {"REVERT": "regression", "PROMOTE": "gain", "NO CHANGE": "flat"}.get(decided, "inconclusive")
    rows = tuple(DecidedCell(f"closed/c{c}/{pc}/p128", f"c{c} {pc}", "decode_tok_s", cell_outcome,
                             float(by["k3"][c, pc]), float(by["k5"][c, pc]), float(r), float(r) - HALF_WIDTH,
                             float(r) + HALF_WIDTH) for (c, pc), r in ratios.items())
    return Decided(run_id, series_name("nightly", "k5", "k3"), "k3", "k5", decided, "decode_tok_s", est,
                   est - HALF_WIDTH, est + HALF_WIDTH, 3, "synthetic: mean of the stored medians' ratios", started,
                   rows)


def record_decisions(path: Path) -> tuple[int, float]:
    con = db.connect(path)
    try:
        runs = db.query_df(con, db.load_sql("dashboard/runs.sql"), {"limit": 100_000})
        todo = runs[runs["decided"].isna()].iloc[::-1]  # oldest first; a kept history keeps its decisions
        t = time.perf_counter()
        for r in todo.itertuples(index=False):
            record(con, [nightly_decision(con, r.run_id, r.started_at)])
        return len(todo), time.perf_counter() - t
    finally:
        con.close()


def build(path: Path) -> None:
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "history_scale.py"), "--db", str(path), "--keep",
                    "--repeat", "1"], check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", type=Path, help="a history built by history_scale.py, built there if missing (default: "
                                            "one built in a temp dir and removed)")
    ap.add_argument("--repeat", type=int, default=5, help="requests per page (first and median printed)")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="specwatch-dashboard-bench-"))
    try:
        measure(args.db or home / "history.duckdb", home, args.repeat)
    finally:
        shutil.rmtree(home, ignore_errors=True)  # a temp history is ~0.5 GB; a --db one is kept


def measure(path: Path, home: Path, repeat: int) -> None:
    if not path.exists():
        build(path)
    runs, secs = record_decisions(path)
    con = db.connect(path, read_only=True)
    try:
        requests = con.execute("SELECT count(*) FROM requests").fetchone()[0]  # type: ignore[index]
        alerts = db.query_df(con, db.load_sql("alerts/list.sql"), {"open_only": False, "limit": 100_000})
        key = db.query_df(con, db.load_sql("dashboard/series.sql"))["series_key"].iloc[0]  # the most alerted
        latest = db.query_df(con, db.load_sql("dashboard/runs.sql"), {"limit": 1})["run_id"].iloc[0]
    finally:
        con.close()
    alert_id, planted = alerts["alert_id"].iloc[0], alerts["first_run_id"].iloc[0]
    print(f"history {path}: {requests:,} request rows; {runs} decision(s) recorded in {secs:.1f} s, "
          f"{len(alerts)} alert(s)")
    port = free_port()
    proc = start_specwatch(["dashboard", "--db", str(path), "--port", str(port)], home, "SIGTERM stops it", 120)
    base = f"http://127.0.0.1:{port}"
    pages = [("alert list (open)", "/"), ("alert list (all)", "/?all=1"), ("alert with triage", f"/alerts/{alert_id}"),
             ("series list", "/series"), ("trend of a series", f"/series/{key}"), ("latest runs", "/runs"),
             ("run: compare view", f"/runs/{latest}"), ("run: an alert's first-bad run", f"/runs/{planted}"),
             ("vendored vega.min.js", "/static/vega.min.js")]
    try:
        print(f"\n{'page':<32} {'status':>6} {'KiB':>7} {'first s':>8} {'median s':>9} {'max s':>7}")
        with httpx.Client(base_url=base, timeout=60) as client:
            for label, url in pages:
                times, status, size = [], 0, 0
                for _ in range(repeat):
                    t = time.perf_counter()
                    resp = client.get(url)
                    times.append(time.perf_counter() - t)
                    status, size = resp.status_code, len(resp.content)
                print(f"{label:<32} {status:>6} {size / 1024:>7.0f} {times[0]:>8.3f} {statistics.median(times):>9.3f} "
                      f"{max(times):>7.3f}")
    finally:
        stop_tree(proc, descendants(proc.pid))


if __name__ == "__main__":
    main()
