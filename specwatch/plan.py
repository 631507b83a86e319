"""What an experiment will do before it runs: per arm, its cells and requests; the launch order;
a rough wall time; the rounds a call needs (power). `specwatch validate` prints it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from specwatch import ranks as rk
from specwatch.analysis.rounds import round_order
from specwatch.analysis.sequential import COMPOSITE, PriorVariance, rounds_needed
from specwatch.analysis.verdict import declared_levels, sequential_design
from specwatch.engine.checkpoint import cached_model_path, check_checkpoint
from specwatch.engine.images import model_python
from specwatch.engine.images.registry import backend_for
from specwatch.engine.launchers import LaunchContext
from specwatch.engine.launchers.registry import launcher_for
from specwatch.engine.platforms import Platform, platform_of
from specwatch.host import host_facts
from specwatch.records import ImageRef
from specwatch.redact import redact_argv, redact_env
from specwatch.spec import ExperimentSpec, ImageSpec
from specwatch.store.priors import RunFacts


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
    rounds: int
    launches: int
    seconds: float
    order: list[tuple[str, int]]
    platforms: dict[str, Platform]  # per image name (planned_platforms): the launches use the same


def planned_platforms(spec: ExperimentSpec) -> dict[str, Platform]:
    """Per image name, the platform its arms will launch on: the vLLM build its backend says it has
    (a `python` image's environment is probed once, when the interpreter is on this host)."""
    return {image.name: platform_of(backend_for(image).package(image)) for image in spec.images}


def _round_s(spec: ExperimentSpec, decode_tok_s: float) -> float:
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
    rounds = design.max_rounds if design.adaptive and design.max_rounds else design.rounds
    rates = len(wl.request_rates) + (1 if wl.ramp_up else 0)
    cells = (len(wl.concurrency) + rates) * len(wl.classes)
    rows, total, launches = [], 0.0, 0
    platforms = planned_platforms(spec)
    for arm in spec.arms:
        image = spec.image(arm.image)
        platform = platforms[image.name]
        launcher = launcher_for(arm, image)
        boots = rounds if launcher.boots else 0
        launches += boots
        total += boots * platform.boot_estimate_s + rounds * _round_s(spec, platform.decode_estimate_tok_s)
        rows.append(ArmPlan(
            arm=arm.name, image=backend_for(image).describe(image), platform=platform.name, launcher=launcher.name,
            method=arm.speculative.method if arm.speculative else "off", k=arm.k, cells=cells * rounds,
            requests=f"{wl.duration_s:g}s/cell" if wl.duration_s else str(rounds * len(wl.classes) * (
                sum(wl.cell_requests(c) for c in wl.concurrency) + rates * wl.requests_per_cell)),
        ))
    return Plan(rows, rounds, launches, total, round_order([a.name for a in spec.arms], design.rounds), platforms)


@dataclass(frozen=True)
class RankLaunch:
    arm: str
    rank: int
    role: str
    host: str
    argv: list[str]  # secrets redacted
    env: dict[str, str]  # the rendered env file, secrets redacted


def rank_launches(spec: ExperimentSpec, platforms: dict[str, Platform], round_no: int = 1) -> list[RankLaunch]:
    """Per arm and rank, the exact launch (workers first, the head last; an arm without ranks is one
    server, rank 0), for `specwatch validate --plan`, as its launcher shows it. An arm whose launcher
    starts nothing (an endpoint) launches nothing.

    The run id and the head's port exist only at run time: `<run>` and `<port>` stand for them.
    """
    hosts = {h.name: h for h in spec.hosts}
    model = spec.model.path or (f"<{spec.model.requirement}>" if spec.model.requirement else "<generated model>")
    out = []
    for arm in spec.arms:
        image = spec.image(arm.image)
        launcher = launcher_for(arm, image)
        if not launcher.boots:
            continue
        arm = arm.with_draft(Path("<early-exit draft>"))  # written by the model step, at run time
        rendered = rk.render(arm, hosts)
        ctx = LaunchContext(model_dir=Path(str(model)), served_name=spec.served_name, arm_dir=Path("."),
                            max_model_len=spec.model.max_model_len, ranks=tuple(rendered),
                            max_concurrency=spec.workload.max_streams)
        launch = f"<run>-{arm.name}-b{round_no}"
        ranks: list[rk.Rank | None] = [*sorted(rendered, key=lambda r: r.role == "head")] or [None]
        for rank in ranks:
            argv = launcher.plan_argv(arm, platforms[image.name], ctx, rank, launch, image)
            env = redact_env(rank.env if rank else arm.env)
            out.append(RankLaunch(arm.name, rank.index if rank else 0, rank.role if rank else "server",
                                  rank.host if rank else rk.LOCAL, redact_argv(argv), env))
    return out


# The paired per-round sd of the log-ratio where no stored variance exists: benchmarks/README.md section 9's
# fit. GPU: the H200 runs pooled per concurrency (c=1 0.090, c=16 0.211, c=64 0.372); a level is given the
# fit of the nearest fitted concurrency at or below it, rate cells the c=16 one (they are not fitted).
# CPU: the composite of the 2-core host's real-model runs with common prompts over rounds (two A/As and the
# demo's A/B; 0.047 code, 0.035 prose per cell): a host of other cores or another model may be noisier.
_GPU_SD = ((64, 0.372), (16, 0.211), (1, 0.090))
_CPU_SD = 0.030
PLAN_POWER = 0.8


@dataclass(frozen=True)
class RoundsNeeded:
    """How many rounds a +-`effect` call needs at one load level, and what they cost."""

    level: str
    effect: float
    sd: float
    source: str
    rounds: int | None  # None: not within 10,000 rounds
    minutes: float | None


def _default_sd(level: str, gpu: bool) -> tuple[float, str]:
    if not gpu:
        return _CPU_SD, "default: the 2-core CPU host's measured 0.030 (benchmarks/README.md section 9)"
    c = int(level.removeprefix("c=")) if level.startswith("c=") else 16
    floor, sd = next((f, v) for f, v in _GPU_SD if c >= f)
    return sd, f"default: H200 fit at c={floor} (benchmarks/README.md section 9)"


def planned_facts(spec: ExperimentSpec) -> tuple[RunFacts | None, str]:
    """What the run's variance key would be read from, as this host has it now: the baseline's image as
    built before and the checkpoint as prepared before (nothing is built, pulled or converted here), or
    (None, why) where one is not there yet: the image's digest and the model's hash are part of the key."""
    refs: dict[str, ImageRef] = {}

    def built(image: ImageSpec) -> ImageRef | None:
        if image.name not in refs and (ref := backend_for(image).built(image)) is not None:
            refs[image.name] = ref
        return refs.get(image.name)

    base = spec.image(spec.arm(spec.baseline).image)
    if built(base) is None:
        return None, f"image {base.name!r} is not built on this host yet"
    python = None
    if spec.model.path is None:  # as the run does (model_python): the first image with a python prepares it
        ready = []
        for image in spec.images:  # in order, up to the first image not built yet
            if (ref := built(image)) is None:
                break
            ready.append(ref)
        if (python := model_python(ready)) is None:
            if len(ready) < len(spec.images):
                return None, f"image {spec.images[len(ready)].name!r} is not built on this host yet"
            # an endpoint-only run serves the endpoint's own weights: no checkpoint in its key
            return RunFacts(host_facts(), refs, None), ""
    path = cached_model_path(spec.model, python)
    if path is None:
        return None, "the model is not prepared on this host yet"
    return RunFacts(host_facts(), refs, check_checkpoint(path)), ""


def rounds_plan(spec: ExperimentSpec, p: Plan, priors: Mapping[tuple[str, str], PriorVariance] | None = None
                ) -> list[RoundsNeeded]:
    """Per declared load level, the rounds after which a true change of twice the band is called in its
    direction with 80% power, and the minutes that is at the plan's per-round wall time. With a stored
    variance of the lead metric's composite (keyed (sequential.COMPOSITE, metric)) one line for all levels.
    The noisiest level sets the run's need: PROMOTE needs every cell shown non-inferior."""
    design = sequential_design(spec)
    effect = 2 * design.band
    per_round_min = p.seconds / p.rounds / 60 if p.rounds else 0.0
    stored = (priors or {}).get((COMPOSITE, spec.verdict.metrics[0]))
    gpu = any(pl.name == "gpu" for pl in p.platforms.values())
    if stored is not None:
        rows = [("all", stored.sd, f"stored: {stored.source} (df {stored.df})", stored.df)]
    elif gpu:
        rows = [(level, *_default_sd(level, gpu), 0) for level in declared_levels(spec)]
    else:  # one default for every level
        rows = [("every level", *_default_sd("", gpu), 0)]
    out = []
    for level, sd, source, df in rows:
        n = rounds_needed(sd, design, effect, PLAN_POWER, df)
        out.append(RoundsNeeded(level, effect, sd, source, n, None if n is None else n * per_round_min))
    return out
