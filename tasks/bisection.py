"""Bisect stage: the bisect's record into DuckDB after every step, and its culprit report."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.artifacts import create_markdown_artifact

from specwatch.bisect.record import BisectRecord
from specwatch.report import bisect
from specwatch.store import bisects


@task(name="store_bisect")
def store_bisect(db_path: Path, record: BisectRecord) -> None:
    bisects.store_bisect(db_path, record)


@task(name="write_bisect_report")
def write_bisect_report(record: BisectRecord, folder: Path) -> Path:
    path = bisect.write_bisect_report(record, folder)
    key = f"specwatch-bisect-{record.name}".lower().replace("_", "-").replace(".", "-")
    create_markdown_artifact(path.read_text(), key=key, description=f"specwatch bisect {record.bisect_id}")
    return path
