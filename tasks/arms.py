"""Arm stage: one launch of one arm, with its benchmark as a Prefect task of its own."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from specwatch.bench.client import BenchTarget
from specwatch.bench.gates import Gates
from specwatch.bench.runner import CellCallback, Isolated
from specwatch.bench.sweep import SweepRunner
from specwatch.engine.arm import run_arm
from specwatch.engine.launchers import LaunchContext
from specwatch.records import ArmResult, CellResult, CheckpointFacts, ImageRef
from specwatch.spec import ArmSpec, ExperimentSpec, SamplingSpec, SweepSpec, WorkloadSpec


# A measurement is never taken from a cache (a reused cell is not a measurement of this run), and
# never retried: a retried cell is a different measurement.
@task(name="measure_cells", cache_policy=NO_CACHE, retries=0)
def measure_cells(target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec,
                  gates: Gates, on_cell: CellCallback | None = None) -> list[CellResult]:
    return Isolated(on_cell).measure(target, workload, sampling, gates)


@task(name="measure_depths", cache_policy=NO_CACHE, retries=0)
def measure_depths(target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec, gates: Gates,
                   sweep: SweepSpec, on_cell: CellCallback | None = None) -> list[CellResult]:
    return Isolated(on_cell, SweepRunner(sweep)).measure(target, workload, sampling, gates)


class _MeasureTask:
    """A CellRunner whose measurement shows up in Prefect as the `measure_cells` task (a sweep's:
    `measure_depths`)."""

    def __init__(self, on_cell: CellCallback | None, sweep: SweepSpec | None = None) -> None:
        self.on_cell, self.sweep = on_cell, sweep

    def measure(self, target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec,
                gates: Gates) -> list[CellResult]:
        if self.sweep is not None:
            return measure_depths(target, workload, sampling, gates, self.sweep, self.on_cell)
        return measure_cells(target, workload, sampling, gates, self.on_cell)


@task(name="launch_arm", cache_policy=NO_CACHE, retries=0)
def launch_arm(
    arm: ArmSpec, spec: ExperimentSpec, image: ImageRef, ctx: LaunchContext, facts: CheckpointFacts | None,
    namespace: str, round_no: int = 1, on_cell: CellCallback | None = None, sweep: SweepSpec | None = None,
) -> ArmResult:
    """`on_cell`: called in this process with each cell as it finishes (the flow writes it to results.json).
    `sweep`: measure the launch's context-length sweep (flows/sweep.py) instead of the workload's cells."""
    return run_arm(arm, spec, image, ctx, facts, namespace, round_no, runner=_MeasureTask(on_cell, sweep))
