"""`specwatch history` finds a change point planted in a synthetic history and plots it."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from cli.app import app
from specwatch.store.ingest import ingest
from specwatch_testing import records as rf


def test_history_lists_series_with_the_planted_change_point(tmp_path: Path) -> None:
    db = tmp_path / "h.duckdb"
    rng = np.random.default_rng(7)
    for night in range(30):
        # nights 0-14 decode in ~1.0 s per 32 tokens, nights 15-29 in ~1.1 s: a 9% slowdown
        decode_s = (1.0 if night < 15 else 1.1) * (1 + rng.normal(0, 0.01))
        result = rf.run(run_id=f"2026110{night:02d}T020000Z-aaaaaa",
                        arms=[rf.arm("k3", 3, decode_s, [80.0, 60.0, 40.0])])
        result.started_at = rf.T0 + timedelta(days=night)
        ingest(result, db)
    res = CliRunner().invoke(app, ["history", "--db", str(db), "--plots", str(tmp_path / "plots")])
    assert res.exit_code == 0, res.output
    assert res.output.count("30 ") >= 4  # four series (c=1/4 x code/prose), 30 runs each
    assert "2026-12-15" in res.output  # the first night of the new regime
    assert len(re.findall(r"decode -(8\.[5-9]|9\.\d)%", res.output)) == 4  # 1/1.1 - 1 = -9.1%, with noise
    assert len(list((tmp_path / "plots").glob("series-*.png"))) == 4


def test_history_of_an_unknown_series_is_one_line(tmp_path: Path) -> None:
    ingest(rf.run(), tmp_path / "h.duckdb")
    res = CliRunner().invoke(app, ["history", "--db", str(tmp_path / "h.duckdb"), "--series", "ffff"])
    assert res.exit_code == 1 and "no series starting with 'ffff'" in res.output
