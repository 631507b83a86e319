"""Arm stage: one launch of one arm, with its benchmark as a Prefect task of its own."""

from __future__ import annotations

from prefect import task

from specwatch.bench.client import BenchTarget
from specwatch.bench.gates import Gates
from specwatch.bench.runner import Isolated
from specwatch.bench.sweep import SweepRunner
from specwatch.engine.arm import run_arm
from specwatch.engine.launchers import LaunchContext
from specwatch.records import ArmResult, CellResult, CheckpointFacts, ImageRef
from specwatch.spec import ArmSpec, ExperimentSpec, SamplingSpec, SweepSpec, WorkloadSpec


@task(name="measure_cells")
def measure_cells(target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec,
                  gates: Gates) -> list[CellResult]:
    return Isolated().measure(target, workload, sampling, gates)


@task(name="measure_depths")
def measure_depths(target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec, gates: Gates,
                   sweep: SweepSpec) -> list[CellResult]:
    return Isolated(SweepRunner(sweep)).measure(target, workload, sampling, gates)


class _MeasureTask:
    """A CellRunner whose measurement shows up in Prefect as the `measure_cells` task (a sweep's:
    `measure_depths`)."""

    def __init__(self, sweep: SweepSpec | None = None) -> None:
        self.sweep = sweep

    def measure(self, target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec,
                gates: Gates) -> list[CellResult]:
        if self.sweep is not None:
            return measure_depths(target, workload, sampling, gates, self.sweep)
        return measure_cells(target, workload, sampling, gates)


@task(name="launch_arm")
def launch_arm(
    arm: ArmSpec, spec: ExperimentSpec, image: ImageRef, ctx: LaunchContext, facts: CheckpointFacts | None,
    namespace: str, block: int = 1, sweep: SweepSpec | None = None,
) -> ArmResult:
    """`sweep`: measure the launch's context-length sweep (flows/sweep.py) instead of the workload's cells."""
    return run_arm(arm, spec, image, ctx, facts, namespace, block, runner=_MeasureTask(sweep))



