"""Raw results to the run dir first (nothing measured is lost if the database is down),
then DuckDB: a run's rows are replaced in one transaction, so re-ingesting adds no duplicates.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from prefect import task

from specwatch import db
from specwatch.records import RunResult

RESULTS_FILE = "results.json"
TABLES = ("runs", "arms", "cells", "requests", "spec_positions", "quality_results")


def write_raw(result: RunResult, run_dir: Path) -> Path:
    """Atomically (re)write results.json: a crash mid-write never leaves a truncated file."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / RESULTS_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(result.model_dump_json(indent=1))
    tmp.replace(path)
    return path


def read_raw(run_dir: Path) -> RunResult:
    path = run_dir / RESULTS_FILE if run_dir.is_dir() else run_dir
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; pass a run dir (SPECWATCH_HOME/runs/<run_id>) holding {RESULTS_FILE}")
    return RunResult.model_validate_json(path.read_text())


def frames(result: RunResult) -> dict[str, pd.DataFrame]:
    """One DataFrame per table, columns named as in sql/migrations."""
    prov = result.provenance
    ckpt = result.checkpoint
    runs = [{
        "run_id": result.run_id,
        "flow_run_id": result.flow_run_id,
        "experiment_name": result.experiment_name,
        "experiment": json.dumps(result.experiment),
        "experiment_file": prov.experiment_file,
        "experiment_sha256": prov.experiment_sha256,
        "specwatch_version": prov.specwatch_version,
        "hostname": prov.host.hostname,
        "cpu_model": prov.host.cpu_model,
        "cpu_count": prov.host.cpu_count,
        "gpu_model": prov.host.gpu_model,
        "gpu_count": prov.host.gpu_count,
        "gpu_driver": prov.host.gpu_driver,
        "checkpoint_path": str(ckpt.path) if ckpt else None,
        "checkpoint_config_sha256": ckpt.config_sha256 if ckpt else None,
        "checkpoint_index_sha256": ckpt.index_sha256 if ckpt else None,
        "sampling": json.dumps(result.experiment.get("sampling")),
        "exit_code": result.exit_code(),
        "started_at": result.started_at,
        "ended_at": result.ended_at,
    }]
    arms, cells, requests, positions = [], [], [], []
    for arm in result.arms:
        key = {"run_id": result.run_id, "arm": arm.name, "block": arm.block}
        img, launch = arm.image_ref, arm.launch
        arms.append({
            **key,
            "image": arm.image,
            "backend": img.backend if img else None,
            "package": img.package if img else None,
            "vllm_version": img.vllm_version if img else None,
            "image_digest": img.digest if img else None,
            "method": arm.method,
            "k": arm.k,
            "k_confirmed": launch.k_confirmed if launch else None,
            "k_source": launch.k_source if launch else None,
            "status": arm.status,
            "reason": arm.reason,
            "launcher": launch.launcher if launch else None,
            "base_url": launch.base_url if launch else None,
            "launch_argv": json.dumps(launch.argv) if launch else None,
            "launch_env": json.dumps(launch.env) if launch else None,
            "log_path": str(launch.log_path) if launch and launch.log_path else None,
            "boot_s": launch.boot_s if launch else None,
            "started_at": arm.started_at,
            "ended_at": arm.ended_at,
        })
        for cell in arm.cells:
            ckey = {**key, "concurrency": cell.concurrency, "prompt_class": cell.prompt_class}
            summary = cell.summary()
            del summary["acceptance_per_position"]  # stored per position in spec_positions
            cells.append({**ckey, **summary})
            for r in cell.requests:
                row = r.model_dump()
                row["idx"] = row.pop("index")
                requests.append({**ckey, **row})
            w = cell.window
            for pos, (acc, rate) in enumerate(zip(w.accepted_per_position or [], w.acceptance_per_position or [])):
                positions.append({**ckey, "position": pos, "accepted": acc, "acceptance": rate})
    quality = [{"run_id": result.run_id, **q.model_dump(exclude={"check"}), "check_name": q.check}
               for q in result.quality]
    data = {"runs": runs, "arms": arms, "cells": cells, "requests": requests,
            "spec_positions": positions, "quality_results": quality}
    return {table: pd.DataFrame(rows) for table, rows in data.items()}


def ingest(result: RunResult, db_path: Path, tables: tuple[str, ...] = TABLES) -> dict[str, int]:
    """Replace the run's rows in `tables` (default: all), in one transaction; returns rows written per table."""
    con = db.connect(db_path)
    try:
        con.begin()
        try:
            for table in reversed(tables):
                con.execute(db.load_sql(f"ingest/delete_{table}.sql"), {"run_id": result.run_id})
            counts = {}
            for table, frame in frames(result).items():
                if table in tables:
                    db.append(con, table, frame)
                    counts[table] = len(frame)
            con.commit()
        except Exception:
            con.rollback()
            raise
        return counts
    finally:
        con.close()


@task(name="ingest")
def ingest_task(result: RunResult, run_dir: Path, db_path: Path, tables: tuple[str, ...] = TABLES) -> dict[str, int]:
    write_raw(result, run_dir)
    return ingest(result, db_path, tables)
