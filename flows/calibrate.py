"""The calibration flow (`specwatch calibrate`): an A/A run through the A/B flow, then its launch variances
stored as priors for later runs on the same platform, hardware, image and model (issue 22, deliverable 4)."""

from __future__ import annotations

from prefect import flow, get_run_logger
from pydantic import BaseModel

from flows.ab import RunOutcome, ab, stop_servers
from specwatch.analysis.calibration import MeasuredVariance
from specwatch.calibrate import aa_spec
from specwatch.resolve import resolve
from specwatch.spec import ExperimentSpec
from specwatch.store.db import DatabaseError
from specwatch.store.priors import PriorError
from tasks.priors import store_priors


class CalibrationOutcome(BaseModel):
    run: RunOutcome  # the A/A run as the A/B flow ended it
    arm: str  # the arm that ran in every slot
    variances: list[MeasuredVariance] = []
    error: str | None = None  # why nothing was stored


@flow(name="specwatch-calibrate", on_cancellation=[stop_servers], on_crashed=[stop_servers], log_prints=True)
def calibrate(experiment: ExperimentSpec, arm: str | None = None, rounds: int = 3, db: str | None = None,
              experiment_file: str | None = None) -> CalibrationOutcome:
    """Run `arm` (default: the file's two identical arms) in both slots of `rounds` rounds and store the
    between-launch sd of every cell and judged metric, and of each metric's composite."""
    aa = aa_spec(resolve(experiment), arm, rounds)  # CalibrationError: one line, before anything runs
    calibrated = arm or aa.baseline
    run = ab(aa, db=db, experiment_file=experiment_file)
    if run.error:
        return CalibrationOutcome(run=run, arm=calibrated, error=run.error)
    try:
        assert run.result is not None, "an outcome without an error carries its run's record"
        variances = store_priors(run.db_path, aa, run.result, calibrated)
    except (DatabaseError, PriorError) as exc:
        return CalibrationOutcome(run=run, arm=calibrated, error=str(exc))
    get_run_logger().info("run %s: %d launch variance(s) of arm %s stored in %s", run.run_id, len(variances),
                          calibrated, run.db_path)
    return CalibrationOutcome(run=run, arm=calibrated, variances=variances)
