"""Store stage: results.json first (nothing measured is lost if the database is down), then DuckDB."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from specwatch.records import RunResult
from specwatch.store.ingest import TABLES, ingest
from specwatch.store.rundir import write_raw


@task(name="ingest_run")
def ingest_run(result: RunResult, run_dir: Path, db_path: Path, tables: tuple[str, ...] = TABLES) -> dict[str, int]:
    write_raw(result, run_dir)
    return ingest(result, db_path, tables)
