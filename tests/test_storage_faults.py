"""The database cannot take a run: a full disk (a real small tmpfs), a read-only file system, a file that is
read-only to the writer, a folder that cannot exist. The user gets one line, the run's results stay in
its run dir's results.json, and `specwatch ingest RUN_DIR` loads them once the database can be written;
rows already stored are never lost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from specwatch.store.ingest import ingest
from specwatch_testing import records as rf
from specwatch_testing.cli import SPECWATCH, specwatch
from specwatch_testing.experiments import command_ab, fake_checkpoint
from specwatch_testing.records import query as q

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (needs root)")
OLD_RUN = "20261130T120000Z-abcdef"


@contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def fill(disk: Path) -> Path:
    """Write until the disk refuses (ENOSPC); the file is the disk's last free byte."""
    filler = disk / "filler"
    chunk = b"\0" * (64 << 10)
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as exc:
            assert exc.errno == 28, exc  # ENOSPC
    for size in (4096, 512, 1):  # the tail of the last chunk
        try:
            with open(filler, "ab", buffering=0) as f:
                while True:
                    f.write(b"\0" * size)
        except OSError:
            pass
    return filler


def counts(db: Path, run_id: str) -> tuple[int, int, int]:
    (row,) = q(db, "select " + ", ".join(f"(select count(*) from {t} where run_id = '{run_id}')"
                                         for t in ("arms", "cells", "requests")))
    return row


@pytest.fixture(scope="module")
def full_disk_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.CompletedProcess[str], Path,
                                                                               Path]]:
    """`specwatch run` whose database is on a full 4 MiB tmpfs that already holds an earlier run."""
    root = tmp_path_factory.mktemp("full")
    spec = root / "e.yaml"
    spec.write_text(yaml.safe_dump(command_ab("disk-full", str(fake_checkpoint(root / "ckpt")), sys.executable)))
    with tmpfs(root / "disk", "4m") as disk:
        db = disk / "h.duckdb"
        ingest(rf.run(OLD_RUN), db)
        filler = fill(disk)
        res = specwatch("run", str(spec), "--db", str(db), home=root / "home")
        yield res, db, filler


def test_a_full_disk_is_one_line_naming_the_database_and_the_ingest_command(full_disk_run) -> None:
    res, db, _ = full_disk_run
    assert res.returncode == 1, res.stdout + res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1  # Prefect's own task-failure log is the faults helper's row (issue 12)
    assert "cannot write run " in errors[0] and f"to {db}" in errors[0] and "No space left on device" in errors[0]
    assert "results kept in " in errors[0] and "load them with `specwatch ingest " in errors[0]


def test_the_run_is_kept_as_json_and_ingested_once_there_is_space(full_disk_run, tmp_path: Path) -> None:
    res, db, filler = full_disk_run
    run_dir = Path(res.stderr.split("results kept in ")[1].split(",")[0])
    doc = json.loads((run_dir / "results.json").read_text())
    cells = sum(len(a["cells"]) for a in doc["arms"])
    assert [a["status"] for a in doc["arms"]] == ["ok", "ok"] and cells == 2
    assert counts(db, OLD_RUN) == (2, 8, 32)  # the run stored before the disk filled is whole
    assert counts(db, doc["run_id"]) == (0, 0, 0)
    filler.unlink()
    again = specwatch("ingest", str(run_dir), "--db", str(db), home=tmp_path)
    assert again.returncode == 0, again.stderr
    assert counts(db, doc["run_id"]) == (2, cells, sum(len(c["requests"]) for a in doc["arms"] for c in a["cells"]))
    assert counts(db, OLD_RUN) == (2, 8, 32)


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    from specwatch.store.rundir import write_raw

    return write_raw(rf.run("20261201T000000Z-ffffff"), tmp_path / "run").parent


def test_a_new_database_on_a_full_disk_leaves_no_empty_file_behind(tmp_path: Path, run_dir: Path) -> None:
    # DuckDB creates the file before it fails; an empty file would refuse every later open as "not a database"
    with tmpfs(tmp_path / "disk", "1m") as disk:
        filler = fill(disk)
        res = specwatch("ingest", str(run_dir), "--db", str(disk / "new.duckdb"), home=tmp_path)
        assert res.returncode == 1 and "No space left on device" in res.stderr
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]
        filler.unlink()
        assert specwatch("ingest", str(run_dir), "--db", str(disk / "new.duckdb"), home=tmp_path).returncode == 0


def test_a_read_only_file_system_is_one_line(tmp_path: Path, run_dir: Path) -> None:
    with tmpfs(tmp_path / "disk", "8m") as disk:
        db = disk / "h.duckdb"
        ingest(rf.run(OLD_RUN), db)
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        res = specwatch("ingest", str(run_dir), "--db", str(db), home=tmp_path)
        assert res.returncode == 1, res.stderr
        assert res.stderr.strip().splitlines() == [
            f"error: cannot open {db}: IO Error: Cannot open file \"{db}\": Read-only file system; the run dir is "
            "unchanged, run this again once the database is writable"]
        assert counts(db, OLD_RUN) == (2, 8, 32)


def test_a_read_only_database_file_is_one_line(tmp_path: Path, run_dir: Path) -> None:
    # root ignores file modes: the writer runs without CAP_DAC_OVERRIDE, so chmod 444 binds it as any user
    db = tmp_path / "h.duckdb"
    ingest(rf.run(OLD_RUN), db)
    db.chmod(0o444)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(SPECWATCH_HOME=str(tmp_path / "home"), PREFECT_HOME=str(tmp_path / "home" / "prefect"))
    res = subprocess.run(["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search", "--",
                          str(SPECWATCH), "ingest", str(run_dir), "--db", str(db)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 1, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"error: cannot open {db}: ") and "Permission denied" in line
    assert counts(db, OLD_RUN) == (2, 8, 32)


def test_a_database_folder_that_cannot_exist_is_one_line(tmp_path: Path, run_dir: Path) -> None:
    (tmp_path / "file").write_text("")
    res = specwatch("ingest", str(run_dir), "--db", str(tmp_path / "file" / "h.duckdb"), home=tmp_path)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [
        f"error: cannot open {tmp_path / 'file' / 'h.duckdb'}: cannot create the folder {tmp_path / 'file'} (File "
        "exists); the run dir is unchanged, run this again once the database is writable"]
