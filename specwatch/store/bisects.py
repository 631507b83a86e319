"""A bisect in DuckDB (sql/migrations/020_bisects.sql): its row and its steps' rows, replaced each time it is
stored, in one transaction, so the rows always show one consistent moment of the bisect."""

from __future__ import annotations

import contextlib
from pathlib import Path

import duckdb
import pandas as pd

from specwatch.bisect.record import BisectRecord
from specwatch.store import db


def store_bisect(db_path: Path, record: BisectRecord) -> None:
    row = {**record.model_dump(include={"bisect_id", "name", "metric", "status", "headline", "max_steps",
                                        "step_alpha", "started_at", "ended_at", "flow_run_id"}),
           "cells": "; ".join(record.cells), "images": " ".join(record.images),
           "versions": " ".join(record.versions), "family_error": record.error,
           "culprits": "; ".join(record.culprits) or None, "skipped": " ".join(record.skipped) or None,
           "notes": "; ".join(record.notes) or None, "launches": record.launches, "wall_s": record.wall_s}
    steps = pd.DataFrame([{**s.model_dump(exclude={"failed_images"}), "bisect_id": record.bisect_id,
                           "failed_images": " ".join(s.failed_images) or None} for s in record.steps])
    con = db.connect(db_path)
    try:
        con.begin()
        for sql in ("bisects/delete_bisect.sql", "bisects/delete_steps.sql"):
            con.execute(db.load_sql(sql), {"bisect_id": record.bisect_id})
        db.append(con, "bisects", pd.DataFrame([row]))
        db.append(con, "bisect_steps", steps)
        con.commit()
    except duckdb.Error as exc:
        with contextlib.suppress(duckdb.Error):  # a failed commit has ended the transaction already
            con.rollback()
        raise db.DatabaseError(f"cannot store bisect {record.bisect_id} in {db_path}: {db.one_line(exc)}") from None
    finally:
        con.close()
