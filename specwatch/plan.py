"""What an experiment will do before it runs: per arm, its cells and requests; the launch order;
a rough wall time. `specwatch validate` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specwatch.analysis.blocks import block_order
from specwatch.engine.images.python import detected_package
from specwatch.engine.platforms import Platform, platform_of
from specwatch.spec import ExperimentSpec


@dataclass(frozen=True)
class ArmPlan:
    arm: str
    image: str  # package==version, or the endpoint's URL
    platform: str  # cpu, gpu, or unknown (an endpoint; a python image whose interpreter is not on this host)
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
    platforms: dict[str, Platform]  # per image name (planned_platforms): the launches use the same


def planned_platforms(spec: ExperimentSpec) -> dict[str, Platform]:
    """Per image name, the platform its arms will launch on: a `python` image's is the vLLM build its
    environment has (probed once, when the interpreter is on this host), the others' the declared package."""
    return {image.name: platform_of(detected_package(image) if image.backend == "python" else image.package)
            for image in spec.images}


def _block_s(spec: ExperimentSpec, decode_tok_s: float) -> float:
    """One launch's cells, warm-ups and probes at `decode_tok_s` per stream."""
    wl, design = spec.workload, spec.design
    # an open-loop cell lasts as long as its schedule (requests / rate), plus the last request's decode
    rates = [*wl.request_rates, *([(wl.ramp_up.start_rps + wl.ramp_up.end_rps) / 2] if wl.ramp_up else [])]
    open_s = sum(wl.requests_per_cell / r + wl.max_tokens / decode_tok_s for r in rates)
    if wl.duration_s:
        closed_s = len(wl.concurrency) * wl.duration_s
    else:
        closed_s = sum(wl.cell_requests(c) / c * wl.max_tokens / decode_tok_s for c in wl.concurrency)
    return (len(wl.classes) * (closed_s + open_s)
            + (wl.warmup_requests * wl.max_tokens + design.probes * design.probe_tokens) / decode_tok_s)


def plan(spec: ExperimentSpec) -> Plan:
    wl, design = spec.workload, spec.design
    blocks = design.max_blocks if design.adaptive and design.max_blocks else design.blocks
    rates = len(wl.request_rates) + (1 if wl.ramp_up else 0)
    cells = (len(wl.concurrency) + rates) * len(wl.classes)
    rows, total, launches = [], 0.0, 0
    platforms = planned_platforms(spec)
    for arm in spec.arms:
        image = spec.image(arm.image)
        platform = platforms[image.name]
        boots = 0 if image.backend == "endpoint" else blocks
        launches += boots
        total += boots * platform.boot_estimate_s + blocks * _block_s(spec, platform.decode_estimate_tok_s)
        rows.append(ArmPlan(
            arm=arm.name, image=image.describe(), platform=platform.name,
            launcher="endpoint" if boots == 0 else arm.launcher,
            method=arm.speculative.method if arm.speculative else "off", k=arm.k, cells=cells * blocks,
            requests=f"{wl.duration_s:g}s/cell" if wl.duration_s else str(blocks * len(wl.classes) * (
                sum(wl.cell_requests(c) for c in wl.concurrency) + rates * wl.requests_per_cell)),
        ))
    return Plan(rows, blocks, launches, total, block_order([a.name for a in spec.arms], design.blocks), platforms)


@dataclass(frozen=True)
class RankLaunch:
    arm: str
    rank: int
    role: str
    host: str
    argv: list[str]  # secrets redacted
    env: dict[str, str]  # the rendered env file, secrets redacted


def rank_launches(spec: ExperimentSpec, platforms: dict[str, Platform], block: int = 1) -> list[RankLaunch]:
    """Per arm and rank, the exact launch (workers first, the head last; an arm without ranks is one
    server, rank 0), for `specwatch validate --plan`. An endpoint arm launches nothing.

    The run id and the head's port exist only at run time: `<run>` and `<port>` stand for them.
    """
    from specwatch import ranks as rk
    from specwatch.engine.launchers import LaunchContext
    from specwatch.engine.launchers.docker import CONTAINER_CLI, docker_run_argv, rank_name
    from specwatch.engine.launchers.vllm import VLLM_CLI, program, server_args
    from specwatch.redact import redact_argv, redact_env

    hosts = {h.name: h for h in spec.hosts}
    model = spec.model.path or (f"<{spec.model.requirement}>" if spec.model.requirement else "<generated model>")
    out = []
    for arm in spec.arms:
        image = spec.image(arm.image)
        if image.backend == "endpoint":
            continue
        rendered = rk.render(arm, hosts)
        ctx = LaunchContext(model_dir=Path(str(model)), served_name=spec.served_name, arm_dir=Path("."),
                            max_model_len=spec.model.max_model_len, ranks=tuple(rendered),
                            max_concurrency=spec.workload.max_streams)
        launch = f"<run>-{arm.name}-b{block}"
        ranks: list[rk.Rank | None] = [*sorted(rendered, key=lambda r: r.role == "head")] or [None]
        for rank in ranks:
            args = server_args(arm, platforms[image.name], ctx, "<port>", rank,
                               (rendered[0].address, "<master port>") if rendered else ("", 0))
            env = redact_env(rank.env if rank else arm.env)
            if image.backend == "docker":
                name = rank_name(launch, rank.index) if rank else launch
                argv = docker_run_argv(name, {"specwatch.run": "<run>", "specwatch.launch": launch}, {},
                                       Path(str(model)), image.describe(),
                                       [*program(rank, "python3", CONTAINER_CLI), *args],
                                       env_file=f"<env file of {name}>", cli="<specwatch>/engine/vllm_cli.py")
            else:
                argv = [*program(rank, "<image python>", VLLM_CLI), *args]
            out.append(RankLaunch(arm.name, rank.index if rank else 0, rank.role if rank else "server",
                                  rank.host if rank else rk.LOCAL, redact_argv(argv), env))
    return out
