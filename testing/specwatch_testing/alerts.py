"""A history with a planted regression, and decided comparisons on it, for alert and dashboard tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from specwatch.alerts.decided import Decided, DecidedCell, Outcome, series_name
from specwatch.store.ingest import ingest
from specwatch_testing import records

T0 = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
SERIES = series_name("nightly", "k5", "k3")
NIGHTS = 12
SLOW_FROM = 7  # the candidate k5 is 1.3x slower from this night on


def run_id(night: int) -> str:
    return f"run-{night:02d}"


def cells(outcome: str, est: float) -> tuple[DecidedCell, ...]:
    return tuple(DecidedCell(f"closed/c{c}/{pc}/p128", f"c{c} {pc}", "decode_tok_s", outcome, 40.0, 40.0 * (1 + est),
                             est, est - 0.03, est + 0.03) for c in (1, 4) for pc in ("code", "prose"))


def decided(night: int, outcome: Outcome, est: float = -0.12) -> Decided:
    """The nightly's k5-vs-k3 A/B of `night`, decided `outcome` with the effect `est` (+-3%) in four cells."""
    cell_outcome = {"REVERT": "regression", "PROMOTE": "gain"}.get(outcome, "flat")
    return Decided(run_id=run_id(night), series=SERIES, baseline_arm="k3", candidate_arm="k5", outcome=outcome,
                   metric="decode_tok_s", estimate=est, low=est - 0.03, high=est + 0.03, rounds=3, reason="planted",
                   started_at=T0 + timedelta(days=night), cells=cells(cell_outcome, est))


def planted_history(path: Path) -> None:
    """Twelve nightly runs of k3 and k5 ingested into `path`; k5 slows down 1.3x from night SLOW_FROM."""
    for night in range(NIGHTS):
        slow = 1.3 if night >= SLOW_FROM else 1.0
        jitter = 1 + 0.01 * (night % 3 - 1)
        result = records.run(run_id(night), [records.arm("k3", 3, 1.0 * jitter, [80.0, 60.0, 40.0]),
                                             records.arm("k5", 5, 0.9 * slow * jitter, [80.0, 60.0, 40.0, 20.0, 10.0])])
        ingest(result.model_copy(update={"started_at": T0 + timedelta(days=night), "experiment_name": "nightly"}),
               path)
