"""Calibration stage: an A/A run's launch variances into `variance_priors` (specwatch/store/priors.py)."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from specwatch.analysis.calibration import MeasuredVariance
from specwatch.records import RunResult
from specwatch.spec import ExperimentSpec
from specwatch.store.priors import store_calibration


@task(name="store_priors")
def store_priors(db_path: Path, aa: ExperimentSpec, result: RunResult, arm: str) -> list[MeasuredVariance]:
    return store_calibration(db_path, aa, result, arm)
