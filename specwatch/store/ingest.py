"""A run into DuckDB and back: a run's rows are replaced in one transaction, so re-ingesting adds
no duplicates, and `load` rebuilds the run from the database alone.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
from pydantic import BaseModel

from specwatch.analysis.metrics import cell_values
from specwatch.records import (
    SLO_NAMES,
    ArmResult,
    CellResult,
    CheckpointFacts,
    ClientCheck,
    HostFacts,
    HostLoad,
    ImageRef,
    LaunchRecord,
    Provenance,
    QualityRecord,
    RankRecord,
    Redo,
    RequestSample,
    RunResult,
    SpecWindow,
)
from specwatch.store import db

TABLES = ("runs", "arms", "cells", "cell_metrics", "requests", "spec_positions", "quality_results", "probes", "ranks",
          "redos")


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
        "gpu_memory_mib": prov.host.gpu_memory_mib,
        "checkpoint_path": str(ckpt.path) if ckpt else None,
        "checkpoint_config_sha256": ckpt.config_sha256 if ckpt else None,
        "checkpoint_index_sha256": ckpt.index_sha256 if ckpt else None,
        "sampling": json.dumps(result.experiment.get("sampling")),
        "checkpoint": ckpt.model_dump_json() if ckpt else None,
        "host": prov.host.model_dump_json(),
        "variance_priors": None if result.variance_priors is None else json.dumps(
            [p.model_dump() for p in result.variance_priors]),
        "exit_code": result.exit_code(),
        "partial": result.partial,
        "interrupted": result.interrupted,
        "started_at": result.started_at,
        "ended_at": result.ended_at,
    }]
    arms, cells, metrics, requests, positions, probes, ranks = [], [], [], [], [], [], []
    for arm in result.arms:
        key = {"run_id": result.run_id, "arm": arm.name, "round": arm.round}
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
            "kv_cache_tokens": launch.kv_cache_tokens if launch else None,
            "kv_cache_source": launch.kv_cache_source if launch else None,
            "client_cores": launch.client_cores if launch else None,
            "k_requested": arm.k_requested,
            "fallback_reason": arm.fallback_reason,
            "status": arm.status,
            "reason": arm.reason,
            "launcher": launch.launcher if launch else None,
            "base_url": launch.base_url if launch else None,
            "launch_argv": json.dumps(launch.argv) if launch else None,
            "launch_env": json.dumps(launch.env) if launch else None,
            "log_path": str(launch.log_path) if launch and launch.log_path else None,
            "boot_s": launch.boot_s if launch else None,
            "gpu_memory_utilization": launch.gpu_memory_utilization if launch else None,
            "max_num_seqs": launch.max_num_seqs if launch else None,
            "started_at": arm.started_at,
            "ended_at": arm.ended_at,
        })
        probes += [{**key, "probe": i, "token_ids": ids} for i, ids in enumerate(arm.probes or [])]
        ranks += [{**key, **r.model_dump(mode="json", exclude={"argv", "env"}), "argv": json.dumps(r.argv),
                   "env": json.dumps(r.env)} for r in (launch.ranks if launch else [])]
        for cell in arm.cells:
            ckey = {**key, "cell": cell.cell}
            summary = cell.summary()
            del summary["acceptance_per_position"]  # stored per position in spec_positions
            cells.append({**ckey, **summary, "host": cell.host.model_dump_json() if cell.host else None})
            metrics += [{**ckey, "metric": name, "value": value} for name, value in cell_values(cell).items()]
            for r in cell.requests:
                row = r.model_dump()
                row["idx"] = row.pop("index")
                row["itl_hist"] = None if r.itl_hist is None else json.dumps(r.itl_hist)
                requests.append({**ckey, **row})
            w = cell.window
            accepted = w.accepted_per_position or []
            # A window without drafts (a cell whose server hung before drafting) has counts but no rates.
            no_rates: list[float | None] = [None] * len(accepted)
            rates = w.acceptance_per_position or no_rates
            for pos, (acc, rate) in enumerate(zip(accepted, rates, strict=True)):
                positions.append({**ckey, "position": pos, "accepted": acc, "acceptance": rate})
    quality = [{"run_id": result.run_id, **q.model_dump(exclude={"check"}), "check_name": q.check}
               for q in result.quality]
    redos = [{"run_id": result.run_id, "seq": seq, "arm": r.arm, "round": r.round, "reason": r.reason,
              "started_at": r.launch.started_at, "ended_at": r.launch.ended_at, "launch": r.launch.model_dump_json()}
             for seq, r in enumerate(result.redos, 1)]
    data = {"runs": runs, "arms": arms, "cells": cells, "cell_metrics": metrics, "requests": requests,
            "spec_positions": positions, "quality_results": quality, "probes": probes, "ranks": ranks,
            "redos": redos}
    return {table: pd.DataFrame(rows) for table, rows in data.items()}


def ingest(result: RunResult, db_path: Path, tables: tuple[str, ...] = TABLES) -> dict[str, int]:
    """Replace the run's rows in `tables` (default: all), in one transaction; returns rows written per table."""
    con = db.connect(db_path)
    try:
        con.begin()
        for table in reversed(tables):
            con.execute(db.load_sql(f"ingest/delete_{table}.sql"), {"run_id": result.run_id})
        counts = {}
        for table, frame in frames(result).items():
            if table in tables:
                db.append(con, table, frame)
                counts[table] = len(frame)
        con.commit()
        con.close()  # a checkpoint on close writes too: a full disk shows here
        return counts
    except (duckdb.Error, OSError) as exc:
        # A failed commit has already ended the transaction; rollback would then raise over the real error.
        with contextlib.suppress(duckdb.Error):
            con.rollback()
        raise db.DatabaseError(f"cannot write run {result.run_id} to {db_path}: {db.one_line(exc)}") from None
    finally:
        with contextlib.suppress(duckdb.Error):  # closed above, or closing fails as the commit did
            con.close()


def _rows(con: duckdb.DuckDBPyConnection, table: str, run_id: str) -> list[dict[str, Any]]:
    frame = con.execute(db.load_sql(f"report/{table}.sql"), {"run_id": run_id}).df()
    frame = frame.astype(object).where(frame.notna(), None)
    return frame.to_dict("records")


def _own(model: type[BaseModel], row: dict[str, Any], **renamed: str) -> dict[str, Any]:
    """The columns of `row` that are fields of `model` (records reject unknown keys), renamed."""
    picked = {field: row[column] for field, column in renamed.items()}
    return {**{k: v for k, v in row.items() if k in model.model_fields}, **picked}


def load(con: duckdb.DuckDBPyConnection, run_id: str) -> RunResult:
    """The inverse of `frames`: a run rebuilt from DuckDB alone (for `specwatch report`)."""
    runs = _rows(con, "run", run_id)
    if not runs:
        raise LookupError(f"run {run_id!r} is not in the database; "
                          "`specwatch sql \"select run_id from runs\"` lists them")
    run = runs[0]
    cell_key = ("arm", "round", "cell")
    requests: dict[tuple[Any, ...], list[RequestSample]] = {}
    for r in _rows(con, "requests", run_id):
        hist = r["itl_hist"] and json.loads(r["itl_hist"])
        lists = {name: None if r[name] is None else list(r[name])
                 for name in ("spec_acceptance_histogram", "window_accepted_per_position")}
        requests.setdefault(tuple(r[k] for k in cell_key), []).append(RequestSample.model_validate({
            **_own(RequestSample, r, index="idx"), "itl_hist": hist, **lists}))
    positions: dict[tuple[Any, ...], dict[int, float]] = {}
    for p in _rows(con, "spec_positions", run_id):
        positions.setdefault(tuple(p[k] for k in cell_key), {})[p["position"]] = p["accepted"]
    cells: dict[tuple[Any, ...], list[CellResult]] = {}
    for c in _rows(con, "cells", run_id):
        key = tuple(c[k] for k in cell_key)
        per_pos = positions.get(key)
        accepted = [per_pos[i] for i in sorted(per_pos)] if per_pos else None
        window = SpecWindow.model_validate({**_own(SpecWindow, c), "accepted_per_position": accepted})
        limits = {name: c[f"slo_{name}"] for name in SLO_NAMES if c[f"slo_{name}"] is not None}
        client = {name: c[f"client_{name}"] for name in ClientCheck.model_fields}
        cell = CellResult.model_validate({**_own(CellResult, c), "window": window, "slo": limits or None,
                                          "host": c["host"] and HostLoad.model_validate_json(c["host"]),
                                          "client": ClientCheck.model_validate(client)
                                          if client["workers"] is not None else None,
                                          "requests": sorted(
            requests.get(key, []), key=lambda r: r.index), "flags": [] if c["flags"] is None else list(c["flags"])})
        cells.setdefault(key[:2], []).append(cell)
    probes: dict[tuple[Any, ...], list[list[int]]] = {}
    for p in sorted(_rows(con, "probes", run_id), key=lambda p: p["probe"]):
        probes.setdefault((p["arm"], p["round"]), []).append(list(p["token_ids"]))
    ranks: dict[tuple[Any, ...], list[RankRecord]] = {}
    for r in sorted(_rows(con, "ranks", run_id), key=lambda r: r["rank"]):
        ranks.setdefault((r["arm"], r["round"]), []).append(RankRecord.model_validate(
            {**_own(RankRecord, r), "argv": json.loads(r["argv"]), "env": json.loads(r["env"])}))
    arms = []
    for a in sorted(_rows(con, "arms", run_id), key=lambda a: a["started_at"]):
        key = (a["arm"], a["round"])
        image = ImageRef(name=a["image"], backend=a["backend"], package=a["package"], vllm_version=a["vllm_version"],
                         digest=a["image_digest"]) if a["backend"] else None
        launch = LaunchRecord(launcher=a["launcher"], base_url=a["base_url"], argv=json.loads(a["launch_argv"]),
                              env=json.loads(a["launch_env"]), log_path=a["log_path"], boot_s=a["boot_s"],
                              k_confirmed=a["k_confirmed"], k_source=a["k_source"],
                              kv_cache_tokens=a["kv_cache_tokens"], kv_cache_source=a["kv_cache_source"],
                              client_cores=None if a["client_cores"] is None else list(a["client_cores"]),
                              ranks=ranks.get(key, [])) if a["launcher"] else None
        arms.append(ArmResult.model_validate({
            **_own(ArmResult, a, name="arm"), "image_ref": image, "launch": launch, "probes": probes.get(key),
            "cells": sorted(cells.get(key, []), key=lambda c: c.key.sort_key()),
        }))
    quality = [QualityRecord.model_validate(_own(QualityRecord, q, check="check_name"))
               for q in _rows(con, "quality_results", run_id)]
    redos = [Redo(arm=r["arm"], round=r["round"], reason=r["reason"], launch=ArmResult.model_validate_json(r["launch"]))
             for r in _rows(con, "redos", run_id)]
    host = HostFacts.model_validate_json(run["host"])
    checkpoint = CheckpointFacts.model_validate_json(run["checkpoint"]) if run["checkpoint"] else None
    return RunResult(
        run_id=run_id, flow_run_id=run["flow_run_id"], experiment_name=run["experiment_name"],
        experiment=json.loads(run["experiment"]), checkpoint=checkpoint, arms=arms, quality=quality,
        variance_priors=None if run.get("variance_priors") is None else json.loads(run["variance_priors"]),
        provenance=Provenance(specwatch_version=run["specwatch_version"], host=host,
                              experiment_file=run["experiment_file"], experiment_sha256=run["experiment_sha256"]),
        started_at=run["started_at"], ended_at=run["ended_at"], interrupted=run.get("interrupted"), redos=redos,
    )
