"""Two runs finishing together: DuckDB admits one writing process at a time, so ingest waits
for the lock and retries; nothing is lost."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import duckdb


def _ingest_many(path: str, prefix: str, n: int) -> None:
    from specwatch.store.ingest import ingest
    from specwatch_testing import records as rf

    for i in range(n):
        ingest(rf.run(run_id=f"{prefix}-{i:02d}"), Path(path))


def test_two_processes_ingesting_at_once_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "h.duckdb")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_ingest_many, args=(path, prefix, 6)) for prefix in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    con = duckdb.connect(path, read_only=True)
    try:
        runs = con.execute("select count(*), count(distinct run_id) from runs").fetchone()
        cells = con.execute("select count(*) from cells").fetchone()[0]
    finally:
        con.close()
    assert runs == (12, 12) and cells == 12 * 8
