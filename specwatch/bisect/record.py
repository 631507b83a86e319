"""What a bisect recorded: each step's A/B (its run, decision, interval, launches and wall time) and the
whole bisect's answer. Plain data: the flow passes it between stages, the store and the report read it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel

from specwatch.analysis.bisection import Call, Kind, Pair, StepCall, Survey, conclusion, culprit_line, error_statement
from specwatch.analysis.pairing import Priors
from specwatch.analysis.verdict import decisions
from specwatch.bisect.steps import alpha_of, changelog, max_steps, version_of
from specwatch.records import RunResult
from specwatch.spec import BisectSpec, ExperimentSpec

# The step's sequential decision (analysis/sequential.py), as the search reads it. CONTINUE: the A/B stopped
# before its looks decided, which narrows nothing either.
CALLS: dict[str, Call] = {"PROMOTE": "gain", "REVERT": "regression", "NO CHANGE": "flat",
                          "INCONCLUSIVE": "inconclusive", "CONTINUE": "inconclusive"}


class StepRecord(BaseModel):
    step: int  # 1, 2, ... in the order run
    kind: Kind
    older: str  # the baseline image
    newer: str
    older_version: str
    newer_version: str
    run_id: str
    outcome: str  # the A/B's decision on the metric (PROMOTE, REVERT, NO CHANGE, INCONCLUSIVE), or FAILED
    call: Call
    estimate: float | None = None  # the newer version's relative change, + is better, at the deciding look
    low: float | None = None
    high: float | None = None
    rounds: int = 0
    launches: int = 0
    wall_s: float = 0.0
    reason: str = ""
    failed_images: list[str] = []

    def search_call(self, names: list[str]) -> StepCall:
        pair = Pair(names.index(self.older), names.index(self.newer), self.kind)
        return StepCall(pair, self.call, tuple(names.index(n) for n in self.failed_images))


class BisectRecord(BaseModel):
    bisect_id: str
    name: str
    metric: str
    cells: list[str]
    images: list[str]
    versions: list[str]
    changelogs: list[str | None]
    error: float
    max_steps: int
    step_alpha: float
    error_statement: str
    started_at: datetime
    ended_at: datetime | None = None
    status: Literal["running", "done", "stopped", "error"] = "running"
    headline: str = "running"
    culprits: list[str] = []
    notes: list[str] = []
    skipped: list[str] = []
    steps: list[StepRecord] = []
    flow_run_id: str | None = None

    @property
    def launches(self) -> int:
        return sum(s.launches for s in self.steps)

    @property
    def wall_s(self) -> float:
        end = self.ended_at or datetime.now(UTC)
        return (end - self.started_at).total_seconds()

    def calls(self) -> list[StepCall]:
        return [s.search_call(self.images) for s in self.steps]


def new_record(spec: BisectSpec, bisect_id: str) -> BisectRecord:
    steps = max_steps(spec)
    return BisectRecord(bisect_id=bisect_id, name=spec.name, metric=spec.metric, cells=list(spec.cells),
                        images=[i.name for i in spec.images], versions=[version_of(i) for i in spec.images],
                        changelogs=[changelog(spec, i) for i in spec.images], error=spec.error, max_steps=steps,
                        step_alpha=alpha_of(spec), error_statement=error_statement(spec.error, steps),
                        started_at=datetime.now(UTC))


def step_record(record: BisectRecord, pair: Pair, spec: ExperimentSpec, result: RunResult,
                priors: Priors | None) -> StepRecord:
    """One step's A/B as the search reads it: its decision on the metric, or the images that did not build or
    boot (every launch of theirs failed)."""
    older, newer = record.images[pair.older], record.images[pair.newer]
    ended = result.ended_at or datetime.now(UTC)
    common = {"step": len(record.steps) + 1, "kind": pair.kind, "older": older, "newer": newer,
              "older_version": record.versions[pair.older], "newer_version": record.versions[pair.newer],
              "run_id": result.run_id, "launches": len(result.arms),
              "wall_s": (ended - result.started_at).total_seconds()}
    # an image none of whose launches came up (build or boot failed) is skipped, whatever the other one did
    failed = [name for name in (older, newer) if not any(a.image == name and a.status == "ok" for a in result.arms)]
    arms = [] if failed else decisions(result, spec, priors)
    if not arms:
        reason = next((f"{a.image}: {a.reason}" for a in result.arms if a.status != "ok" and a.reason),
                      "no cell was judged (rejected cells: see the step's report)")
        return StepRecord(**common, outcome="FAILED", call="failed", reason=reason, failed_images=failed)
    d = arms[0].decision
    i = d.composite.interval
    return StepRecord(**common, outcome=d.outcome, call=CALLS[d.outcome], rounds=d.rounds, reason=d.reason,
                      estimate=i.estimate if i else None, low=i.low if i else None, high=i.high if i else None)


def conclude(record: BisectRecord, s: Survey) -> BisectRecord:
    """The record with the search's answer; `done` unless the search stopped before it could narrow."""
    return record.model_copy(update={
        "headline": conclusion(s, record.images), "notes": list(s.notes),
        "culprits": [culprit_line(c, record.images) for c in s.confirmed],
        "skipped": [record.images[i] for i in s.skipped], "ended_at": datetime.now(UTC),
        "status": "stopped" if s.stopped else "done"})
