"""`specwatch history`: each series' latest value, trend and change points, and a plot per series."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from specwatch.analysis.changepoints import ChangePoint, change_points, trend
from specwatch.analysis.sweep import nullable
from specwatch.records import load_level
from specwatch.store import db


@dataclass(frozen=True)
class SeriesSummary:
    key: str
    label: str
    points: int
    latest_version: str
    latest_decode_tok_s: float
    latest_mean_acceptance_length: float | None
    decode_trend: float | None  # relative change per run
    decode_changes: list[tuple[str, ChangePoint]]  # (run started_at, change point)
    acceptance_changes: list[tuple[str, ChangePoint]]


def points(con: duckdb.DuckDBPyConnection, series: str = "") -> pd.DataFrame:
    return db.query_df(con, db.load_sql("history/points.sql"), {"series": series})


def summarize(frame: pd.DataFrame) -> list[SeriesSummary]:
    out = []
    for key, g in frame.groupby("series_key", sort=False):
        first = g.iloc[0]
        conc = nullable(first.concurrency)
        load = load_level(None if conc is None else int(conc), nullable(first.request_rate),
                          nullable(first.ramp_from_rate))
        label = (f"{first.model} {first.method} k={first.k} {load} {first.prompt_class} "
                 f"{first.prompt_tokens}/{first.max_tokens} on {first.host_class}")
        decode = g["decode_tok_s_median"].astype(float).tolist()
        mal = g["mean_acceptance_length"].dropna().astype(float).tolist()
        stamps = [str(t)[:16] for t in g["started_at"]]
        out.append(SeriesSummary(
            key=str(key), label=label, points=len(g), latest_version=str(g.iloc[-1].vllm_version),
            latest_decode_tok_s=decode[-1],
            latest_mean_acceptance_length=mal[-1] if mal else None,
            decode_trend=trend(decode),
            decode_changes=[(stamps[cp.index], cp) for cp in change_points(decode)],
            acceptance_changes=[(stamps[cp.index], cp) for cp in change_points(mal)] if len(mal) == len(g) else [],
        ))
    return out


def plot(frame: pd.DataFrame, summary: SeriesSummary, out_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = frame[frame["series_key"] == summary.key]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.plot(g["started_at"], g["decode_tok_s_median"], marker=".", label="decode tok/s (median of blocks)")
    for _, cp in summary.decode_changes:
        ax.axvline(g["started_at"].iloc[cp.index], color="red", linestyle="--", alpha=0.7)
        ax.annotate(f"{cp.change:+.1%}", (g["started_at"].iloc[cp.index], cp.after), color="red")
    ax.set_title(summary.label, fontsize=9)
    ax.set_ylabel("decode tok/s")
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"series-{summary.key[:12]}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
