"""Secrets planted in an experiment's env and args, and in the CLI's own environment, appear in no log, no
DuckDB row, no report and no Prefect record (flow-run parameters, logs, artifacts) after a real run:
`specwatch run` as a subprocess, launching fake_vllm servers itself (command launcher).

Each place searched must hold a visible marker planted beside the secrets (a non-secret env value and
arg), so a search that looks in the wrong place fails instead of passing on nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
import pytest
import yaml

from specwatch_testing.cli import specwatch
from specwatch_testing.experiments import command_ab, fake_checkpoint

SECRETS = {"HF_TOKEN": "hf_plantedEnvToken1", "MY_SERVICE_KEY": "plantedServiceKey2",
           "DB_PASSWORD": "plantedPassword3", "AWS_SECRET": "plantedAwsSecret4"}
SECRET_ARGS = ["--api-key", "plantedApiKeyArg5", "--hf-token=plantedHfTokenArg6"]
PROCESS_SECRETS = {"HF_TOKEN": "hf_plantedProcessToken7", "OPENAI_API_KEY": "plantedProcessKey8"}
MARKER_ENV, MARKER_ARG = "visibleEnvMarker", "visibleArgMarker"
PLANTED = [*SECRETS.values(), *SECRET_ARGS[1:2], "plantedHfTokenArg6", *PROCESS_SECRETS.values()]


@pytest.fixture(scope="module")
def secret_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    root = tmp_path_factory.mktemp("secrets")
    doc = command_ab("secrets", str(fake_checkpoint(root / "ckpt")), sys.executable,
                     env={**SECRETS, "PLAIN_SETTING": MARKER_ENV}, args=[*SECRET_ARGS, "--plain-flag", MARKER_ARG])
    spec = root / "e.yaml"
    spec.write_text(yaml.safe_dump(doc))
    home, db = root / "home", root / "h.duckdb"
    res = specwatch("run", str(spec), "--db", str(db), home=home, env=PROCESS_SECRETS)
    assert res.returncode in (0, 3), res.stdout + res.stderr
    return home, res.stdout + res.stderr, db


def files(home: Path) -> dict[str, str]:
    """Every file SPECWATCH_HOME holds (run dirs, server logs, state, Prefect's database and its WAL), as text."""
    return {str(p.relative_to(home)): p.read_bytes().decode("latin-1") for p in home.rglob("*") if p.is_file()}


def db_text(db: Path) -> str:
    """Every row of every table as text (DuckDB compresses strings on disk: the file's bytes prove nothing)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        tables = [t for (t,) in con.execute("select table_name from information_schema.tables "
                                            "where table_type = 'BASE TABLE'").fetchall()]
        return "\n".join(str(con.execute(f'select * from "{t}"').fetchall()) for t in tables)
    finally:
        con.close()


def test_no_secret_in_the_cli_output(secret_run) -> None:
    _, output, _ = secret_run
    assert "Finished in state Completed" in output  # the flow's own log lines are in what was searched
    assert [s for s in PLANTED if s in output] == []


def test_no_secret_in_any_file_of_the_run_or_prefect(secret_run) -> None:
    home, _, _ = secret_run
    texts = files(home)
    run_files = {name for name in texts if name.startswith("runs/")}
    assert {n.rsplit("/", 1)[-1] for n in run_files} >= {"results.json", "report.md", "server.log"}
    prefect = "".join(t for n, t in texts.items() if n.startswith("prefect/"))
    # the markers show each place keeps what was planted beside the secrets
    assert MARKER_ENV in texts[next(n for n in run_files if n.endswith("results.json"))]
    assert MARKER_ARG in texts[next(n for n in run_files if n.endswith("server.log"))]  # fake_vllm logs its args
    assert MARKER_ENV in next(t for n, t in texts.items() if n.endswith("report.md"))
    assert MARKER_ENV in prefect  # the flow run's parameters
    assert "## Conditions" in prefect  # the report artifact
    leaks = {(name, s) for name, text in texts.items() for s in PLANTED if s in text}
    assert leaks == set()


def test_no_secret_in_duckdb(secret_run) -> None:
    _, _, db = secret_run
    text = db_text(db)
    assert MARKER_ENV in text and MARKER_ARG in text
    assert [s for s in PLANTED if s in text] == []
