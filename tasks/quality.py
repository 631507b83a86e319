"""Quality stage: the GE checks of one run, and of its points against history."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task

from specwatch.records import QualityRecord
from specwatch.spec import Thresholds
from specwatch.store import checks
from specwatch.store.db import connect


@task(name="check_quality")
def check_quality(
    db_path: Path, run_id: str, baseline_arm: str, thresholds: Thresholds, regression_checks: bool = True
) -> list[QualityRecord]:
    # A read-write connection on purpose: a read-only one fails in a process that already has
    # the file open read-write ("different configuration"), and the flow's ingest may.
    con = connect(db_path)
    try:
        return checks.run_checks(con, run_id, baseline_arm, thresholds, regression_checks)
    finally:
        con.close()


@task(name="check_history")
def check_history(db_path: Path, run_id: str, thresholds: Thresholds, policy: str,
                  baseline_run: str | None) -> list[QualityRecord]:
    con = connect(db_path)
    try:
        records, notes = checks.history_records(con, run_id, thresholds, policy, baseline_run)
    finally:
        con.close()
    logger = get_run_logger()
    for note in notes:
        logger.info("history: %s", note)
    return records


@task(name="check_sweep")
def check_sweep(db_path: Path, run_id: str, thresholds: Thresholds, cliff_drop: float) -> list[QualityRecord]:
    con = connect(db_path)
    try:
        return checks.sweep_records(con, run_id, thresholds, cliff_drop)
    finally:
        con.close()
