"""A run from its first launch to its outcome, once for every flow: measure (engine/experiment.py), then
store, check, judge, store again, alert and report, and return everything a flow needs as a `RunOutcome`.

The A/B, the sweep, the nightly and the calibration all end here: what differs between them is a
parameter (`sweep`: a sweep's checks and report instead of a verdict; `history`: the nightly's checks
against history, added before the one verdict and the one report). The stages that touch Prefect
(tasks, artifacts) come in as `EndStages`, the way `Hooks` brings the launch; no flow reads
results.json back from disk, since the outcome carries the run's record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from specwatch.alerts.decided import Decided, from_assessment
from specwatch.alerts.opening import AlertChange
from specwatch.analysis.verdict import Assessment, assess, decision_records
from specwatch.engine.checkpoint import CheckpointError
from specwatch.engine.experiment import Hooks, HostBusy, Log, ResumeRefused, run_experiment
from specwatch.records import QualityRecord, RunResult
from specwatch.report.rows import VerdictRow, headline, verdict_rows
from specwatch.spec import ExperimentSpec, SweepSpec, Thresholds
from specwatch.store.db import DatabaseError
from specwatch.store.priors import PriorError, run_priors
from specwatch.store.rundir import write_raw


class HistoryBaseline(BaseModel):
    """Which past run each point is compared with (always within its own series)."""

    policy: Literal["auto", "previous-image", "same-image", "run"] = Field(
        default="auto", description="auto: the previous image version when history has one, else the same image"
    )
    run_id: str | None = Field(default=None, description="with policy 'run': the run to compare with")


class RunOutcome(BaseModel):
    run_id: str
    run_dir: Path
    db_path: Path
    exit_code: int
    headline: str
    decision: str | None = None  # PROMOTE, REVERT, NO CHANGE or INCONCLUSIVE; None: not decided (could not run)
    reasons: list[str] = []  # what the verdict table does not show (it holds the per-cell verdicts)
    rows: list[VerdictRow] = []
    alerts: list[str] = []  # what the decision did to alerts: opened, counted, verified, reopened
    history: list[str] = []  # the history checks that failed (a nightly's), one line each
    error: str | None = None
    # The run's record as it ended, for the flow that started it (calibration, bisect); not in --json.
    result: RunResult | None = Field(default=None, exclude=True)


@dataclass(frozen=True)
class EndStages:
    """The end's stages as the flows pass them (Prefect tasks); each is named after its task in `tasks/`."""

    ingest_run: Callable[..., object]
    check_quality: Callable[..., list[QualityRecord]]
    check_history: Callable[..., list[QualityRecord]]
    check_sweep: Callable[..., list[QualityRecord]]
    record_alerts: Callable[[Path, list[Decided]], list[AlertChange]]
    write_report: Callable[[RunResult, Path, ExperimentSpec, Assessment, list[VerdictRow]], Path]
    write_sweep_report: Callable[[RunResult, Path, Path], Path]


def conduct(spec: ExperimentSpec, result: RunResult, run_dir: Path, db_path: Path, hooks: Hooks, stages: EndStages,
            sweep: SweepSpec | None = None, history: HistoryBaseline | None = None) -> RunOutcome:
    """Every launch of the run (`run_experiment`), then its end (`end_run`). A run that could not go on is an
    outcome with its error; an interrupt is stored as a partial run and raised."""
    def stopped(code: int, head: str, error: str) -> RunOutcome:
        return RunOutcome(run_id=result.run_id, run_dir=run_dir, db_path=db_path, exit_code=code, headline=head,
                          error=error, result=result)

    try:
        run_experiment(spec, result, run_dir, db_path, hooks, sweep)
    except CheckpointError as exc:
        return stopped(1, "could not run", f"checkpoint: {exc}")
    except PriorError as exc:
        return stopped(1, "could not run", str(exc))
    except ResumeRefused as exc:  # results.json stays as it was
        return stopped(1, "could not resume", str(exc))
    except HostBusy as exc:  # stored as a partial run by the runner: `--resume` continues it
        return stopped(5, "host busy", f"{exc}; what was measured is kept: `specwatch run --resume "
                                       f"{result.run_id}` continues it")
    return end_run(spec, result, run_dir, db_path, stages, hooks.log, sweep, history)


def end_run(spec: ExperimentSpec, result: RunResult, run_dir: Path, db_path: Path, stages: EndStages, log: Log,
            sweep: SweepSpec | None = None, history: HistoryBaseline | None = None) -> RunOutcome:
    """Store, check, judge, store again, alert, report: once. A database that fails keeps results.json."""
    run_id = result.run_id
    assessment: Assessment | None = None
    changes: list[AlertChange] = []
    try:
        stages.ingest_run(result, run_dir, db_path)
        # rounds give sweep points their intervals; the A/B's single-boot band check does not apply to them
        single_boot = sweep is None and spec.design.rounds == 1 and not spec.design.adaptive
        result.quality = stages.check_quality(db_path, run_id, spec.baseline, spec.thresholds,
                                              regression_checks=single_boot)
        if sweep is not None:
            result.quality += stages.check_sweep(db_path, run_id, spec.thresholds, sweep.cliff_drop)
        past = _history(stages, db_path, run_id, spec.thresholds, sweep, history)
        result.quality += past
        if sweep is None:
            # the one verdict (the checks, the report and the outcome share it), on the variances the looks read
            assessment = assess(result, spec, run_priors(db_path, spec, result))
            result.quality += decision_records(assessment, spec)
        # the run's exit code depends on the checks, so its row is rewritten with them
        stages.ingest_run(result, run_dir, db_path, tables=("runs", "quality_results"))
        if assessment is not None:
            changes = stages.record_alerts(db_path, from_assessment(result, spec, assessment))
    except DatabaseError as exc:
        write_raw(result, run_dir)
        return RunOutcome(run_id=run_id, run_dir=run_dir, db_path=db_path, exit_code=1, headline="not stored",
                          error=f"{exc}; results kept in {run_dir}, load them with `specwatch ingest {run_dir}`",
                          result=result)
    failed_history = [f"{q.arm} {q.cell}: {q.detail}" for q in past if not q.passed]
    if assessment is None:
        report = stages.write_sweep_report(result, run_dir, db_path)
        head = sweep_headline(result)
        log.info("sweep %s: %s; report %s", run_id, head, report)
        return RunOutcome(run_id=run_id, run_dir=run_dir, db_path=db_path, exit_code=result.exit_code(),
                          headline=head, history=failed_history, result=result,
                          reasons=[f"{q.arm} {q.cell}: {q.detail}" for q in result.quality if not q.passed])
    rows = verdict_rows(result, spec, assessment)  # after the checks: an invalid cell's row says so
    report = stages.write_report(result, run_dir, spec, assessment, rows)
    head = headline(result, assessment)
    log.info("run %s: %s; report %s", run_id, head, report)
    return RunOutcome(run_id=run_id, run_dir=run_dir, db_path=db_path, exit_code=result.exit_code(), headline=head,
                      decision=assessment.verdict.decision, reasons=assessment.verdict.all_reasons, rows=rows,
                      alerts=[f"alert #{c.alert_id} {c.event}: {c.text}" for c in changes], history=failed_history,
                      result=result)


def _history(stages: EndStages, db_path: Path, run_id: str, thresholds: Thresholds, sweep: SweepSpec | None,
             history: HistoryBaseline | None) -> list[QualityRecord]:
    """A sweep's points always meet their history (auto); an A/B's only when the nightly asks."""
    if history is None and sweep is None:
        return []
    policy = history or HistoryBaseline()
    return stages.check_history(db_path, run_id, thresholds, policy.policy, policy.run_id)


def sweep_headline(result: RunResult) -> str:
    cells = [c for a in result.arms for c in a.cells]
    measured = [c for c in cells if c.skip_reason is None and not c.rejected]
    cliffs = [q for q in result.quality if q.check == "sweep.cliff" and not q.passed]
    looped = [c for c in measured if c.loop_detected]
    return (f"{len(measured)} point(s) measured, {len(cells) - len(measured)} skipped or rejected, "
            f"{len(looped)} with a loop, {len(cliffs)} cliff(s)")
