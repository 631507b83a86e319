"""`specwatch history`: each series' latest values, trend and change points of the catalogue's history
metrics (specwatch/analysis/metrics.py, `trend`), and a plot per series."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from specwatch.analysis.changepoints import ChangePoint, change_points, trend
from specwatch.analysis.metrics import Metric, trends
from specwatch.analysis.sweep import nullable
from specwatch.records import load_level
from specwatch.store import db


@dataclass(frozen=True)
class Trend:
    """One catalogue metric along a series."""

    metric: Metric
    latest: float | None
    changes: list[tuple[str, ChangePoint]]  # (run started_at, change point)


@dataclass(frozen=True)
class SeriesSummary:
    key: str
    label: str
    points: int
    latest_version: str
    per_run: float | None  # the headline metric's relative change per run
    trends: list[Trend]  # the catalogue's history metrics, the headline first


_POINT = ["series_key", "run_id", "arm"]


def points(con: duckdb.DuckDBPyConnection, series: str = "") -> pd.DataFrame:
    """One row per point, oldest first, with a column per history metric (its stored name)."""
    frame = db.query_df(con, db.load_sql("history/points.sql"), {"series": series})
    values = db.query_df(con, db.load_sql("history/point_metrics.sql"),
                         {"series": series, "metrics": [m.column for m in trends()]})
    for m in trends():
        column = values[values["metric"] == m.column].drop(columns="metric").rename(columns={"value": m.column})
        frame = frame.merge(column, on=_POINT, how="left")
    return frame


def summarize(frame: pd.DataFrame) -> list[SeriesSummary]:
    out = []
    for key, g in frame.groupby("series_key", sort=False):
        first = g.iloc[0]
        conc = nullable(first.concurrency)
        load = load_level(None if conc is None else int(conc), nullable(first.request_rate),
                          nullable(first.ramp_from_rate))
        label = (f"{first.model} {first.method} k={first.k} {load} {first.prompt_class} "
                 f"{first.prompt_tokens}/{first.max_tokens} on {first.host_class}")
        stamps = [str(t)[:16] for t in g["started_at"]]
        series = []
        for m in trends():
            values = g[m.column].dropna().astype(float).tolist()
            # a change point indexes the series' points: only a metric present at every point has them
            changes = [(stamps[cp.index], cp) for cp in change_points(values)] if len(values) == len(g) else []
            series.append((Trend(m, values[-1] if values else None, changes), values))
        out.append(SeriesSummary(
            key=str(key), label=label, points=len(g), latest_version=str(g.iloc[-1].vllm_version),
            per_run=trend(series[0][1]), trends=[t for t, _ in series],
        ))
    return out


def plot(frame: pd.DataFrame, summary: SeriesSummary, out_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    headline = summary.trends[0]
    g = frame[frame["series_key"] == summary.key]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.plot(g["started_at"], g[headline.metric.column], marker=".", label=f"{headline.metric.label} (median of rounds)")
    for _, cp in headline.changes:
        ax.axvline(g["started_at"].iloc[cp.index], color="red", linestyle="--", alpha=0.7)
        ax.annotate(f"{cp.change:+.1%}", (g["started_at"].iloc[cp.index], cp.after), color="red")
    ax.set_title(summary.label, fontsize=9)
    ax.set_ylabel(headline.metric.label)
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"series-{summary.key[:12]}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
