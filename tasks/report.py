"""Report stage: the markdown report and plots in the run dir, and the same as Prefect artifacts."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from specwatch.analysis.verdict import Assessment
from specwatch.records import RunResult
from specwatch.report import markdown, sweep
from specwatch.report.rows import VerdictRow
from specwatch.spec import ExperimentSpec
from specwatch.store.db import connect


@task(name="write_report")
def write_report(result: RunResult, run_dir: Path, spec: ExperimentSpec, assessment: Assessment,
                 rows: list[VerdictRow]) -> Path:
    """The report of the verdict the flow computed: `rows` are `verdict_rows(result, spec, assessment)`."""
    path = markdown.write_report(result, spec, assessment, rows, run_dir)
    key = f"specwatch-{result.experiment_name}".lower().replace("_", "-").replace(".", "-")
    create_markdown_artifact(path.read_text(), key=key, description=f"specwatch report {result.run_id}")
    create_table_artifact([r.table_row() for r in rows], key=f"{key}-table",
                          description=f"verdict table {result.run_id}: {assessment.verdict.decision}")
    return path


@task(name="write_sweep_report")
def write_sweep_report(result: RunResult, run_dir: Path, db_path: Path) -> Path:
    con = connect(db_path)
    try:
        points = sweep.sweep_points(con, result.run_id)
    finally:
        con.close()
    path = sweep.write_sweep_report(result, points, run_dir)
    key = f"specwatch-sweep-{result.experiment_name}".lower().replace("_", "-").replace(".", "-")
    create_markdown_artifact(path.read_text(), key=key, description=f"specwatch sweep {result.run_id}")
    return path
