"""Arm stage: one launch of one arm, with its benchmark as a Prefect task of its own."""

from __future__ import annotations

from prefect import task

from specwatch.bench.client import BenchTarget
from specwatch.bench.gates import Gates
from specwatch.bench.runner import Isolated
from specwatch.engine.arm import run_arm
from specwatch.engine.launchers import LaunchContext
from specwatch.records import ArmResult, CellResult, CheckpointFacts, ImageRef
from specwatch.spec import ArmSpec, ExperimentSpec, SamplingSpec, WorkloadSpec


@task(name="measure_cells")
def measure_cells(target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec,
                  gates: Gates) -> list[CellResult]:
    return Isolated().measure(target, workload, sampling, gates)


class _MeasureTask:
    """A CellRunner whose measurement shows up in Prefect as the `measure_cells` task."""

    def measure(self, target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec,
                gates: Gates) -> list[CellResult]:
        return measure_cells(target, workload, sampling, gates)


@task(name="launch_arm")
def launch_arm(
    arm: ArmSpec, spec: ExperimentSpec, image: ImageRef, ctx: LaunchContext, facts: CheckpointFacts | None,
    namespace: str, block: int = 1,
) -> ArmResult:
    return run_arm(arm, spec, image, ctx, facts, namespace, block, runner=_MeasureTask())
