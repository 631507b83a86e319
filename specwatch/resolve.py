"""The step after parsing: an experiment checked against what specwatch knows.

Parsing (specwatch.spec) knows only the file. Resolving checks each name the file holds against its
registry (image backends, launchers, request protocols, prompt classes, transports, metrics), reads
the corpus, renders each arm's ranks, and runs each backend's and launcher's own checks. A problem
is one line at its place in the file, worded and located as a parse problem is.

`load_spec` and `stored_spec` parse and resolve: what the CLI, the report and the store use.
Flows take a parsed `ExperimentSpec` (Prefect validates the parameter) and resolve it first thing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from specwatch import ranks
from specwatch.analysis.metrics import unknown_metrics
from specwatch.bench.corpus import read_corpus
from specwatch.bench.prompts import SOURCES
from specwatch.bench.protocols import PROTOCOLS
from specwatch.bench.transports import TRANSPORTS
from specwatch.engine.images.registry import BACKENDS
from specwatch.engine.launchers.registry import LAUNCHERS
from specwatch.engine.methods import REFUSED, method_refusal
from specwatch.spec import (
    EARLY_EXIT,
    ArmSpec,
    ExperimentSpec,
    HostSpec,
    ImageSpec,
    SpecError,
    WorkloadSpec,
    parse_spec,
    parse_stored,
    problem_line,
)

Problem = tuple[tuple[Any, ...], str]  # where in the file (pydantic's loc), and the message


def resolve(spec: ExperimentSpec, *, source: str | None = None, stored: bool = False) -> ExperimentSpec:
    """`spec`, checked against the registries; SpecError (one line per problem) where it cannot run.

    `source` names the file in the error (default: the experiment's name). `stored`: a past run's
    spec, whose files (the corpus, a wheelhouse) may be gone since, as in parsing.

    Problems of single fields are all reported together, as parsing reports them; the checks of the
    experiment as a whole run once those pass, and the first problem stops them.
    """
    problems = list(_fields(spec, stored)) or list(_launches(spec))
    if problems:
        raw = spec.model_dump()  # the names in a problem's place: `arms[0](k3)`, as from the file
        raise SpecError(source or spec.name, [problem_line(loc, raw, message) for loc, message in problems])
    return spec


def load_spec(path: Path) -> ExperimentSpec:
    """Read, parse and resolve an experiment file (specwatch.spec.parse_spec, then `resolve`)."""
    return resolve(parse_spec(path), source=str(path))


def stored_spec(experiment: dict[str, Any]) -> ExperimentSpec:
    """The spec a past run recorded, parsed and resolved without re-checking what is on disk."""
    return resolve(parse_stored(experiment), stored=True)


def _one_of(kind: str, name: str, known: Collection[str]) -> str | None:
    return None if name in known else f"{kind} {name!r} is not one of {', '.join(sorted(known))}"


def _problem(check: Callable[..., object], *args: Any) -> str | None:
    """What `check(*args)` finds wrong: the message it returns or the ValueError it raises; else None."""
    try:
        found = check(*args)
    except ValueError as exc:
        return str(exc)
    return found if isinstance(found, str) else None


def _fields(spec: ExperimentSpec, stored: bool) -> Iterator[Problem]:
    """Each field's names and files, in the file's order; an image or arm is checked by its plugin."""
    for i, image in enumerate(spec.images):
        if problem := _one_of("backend", image.backend, BACKENDS):
            yield ("images", i, "backend"), problem
        elif problem := _problem(BACKENDS[image.backend].check_image, image, not stored):
            yield ("images", i), problem
    named = {name for name, launcher in LAUNCHERS.items() if launcher.named_by_arms}
    for i, arm in enumerate(spec.arms):
        if problem := _one_of("launcher", arm.launcher, named):
            yield ("arms", i, "launcher"), problem
        elif problem := _problem(LAUNCHERS[arm.launcher].check_arm, arm):
            yield ("arms", i), problem
        if arm.speculative is None:
            continue
        image = spec.image(arm.image)
        if not stored and (problem := _method_runs(arm.speculative.method, image)):
            yield ("arms", i, "speculative", "method"), problem
        if arm.speculative.early_exit and (problem := _early_exit(arm, spec)):
            yield ("arms", i, "speculative", "draft_model"), problem
    yield from ((("workload", *loc), problem) for loc, problem in workload_problems(spec.workload, stored=stored))
    if problem := _timed_comparison(spec):
        yield ("workload", "duration_s"), problem
    if problem := unknown_metrics(spec.verdict.metrics):
        yield ("verdict", "metrics"), f"{problem}; fix: use those names"
    if spec.sweep is not None and (problem := _one_of("prompt class", spec.sweep.prompt_class, SOURCES)):
        yield ("sweep", "prompt_class"), problem


def _timed_comparison(spec: ExperimentSpec) -> str | None:
    """A closed cell that runs for `duration_s` ends after whatever requests each arm got through: the
    faster arm completes more, the requests in flight at the deadline are left out (the slow ones), and
    the arms of a round no longer do the same work, so their requests cannot be paired. A count fixed in
    the file is the same for every arm and round; a duration turned into a count would need a speed
    measured before the round (a guess, or the baseline's noisy first launch) and would change the count,
    and so the variance a calibration stored for the cell, from run to run. One arm compares nothing
    (a sweep sets its own counts)."""
    if spec.workload.duration_s is None or len(spec.arms) < 2 or spec.sweep is not None:
        return None
    return (f"{spec.workload.duration_s:g} s with {len(spec.arms)} arms compared: a time cutoff ends each arm's "
            "cell after different requests (the faster arm completes more, and the requests still in flight are "
            "dropped); fix: remove duration_s and size cells by requests_per_cell, min_waves and batched_waves, "
            "a count every arm sends")


def _method_runs(method: str, image: ImageSpec) -> str | None:
    """The arm's method against the image's platform (specwatch.engine.methods). A `python` image is
    probed only for a method some platform refuses: the probe starts its interpreter."""
    if not any(method in refused for refused in REFUSED.values()):
        return None
    if image.backend not in BACKENDS:
        return None  # reported at the image's own place
    backend = BACKENDS[image.backend]
    if not backend.knows_package and "package" not in image.model_fields_set:
        return None  # a container or endpoint of an unnamed build (a fork, e.g.): its server decides
    return method_refusal(method, backend.package(image), image.version)


def _early_exit(arm: ArmSpec, spec: ExperimentSpec) -> str | None:
    """`draft_model: early-exit` names the draft model.draft_layers writes, for method draft_model,
    on this machine's disk (beside the checkpoint)."""
    assert arm.speculative is not None
    method = arm.speculative.method
    if method != "draft_model":
        return (f"{EARLY_EXIT!r} is the early-exit draft, for method draft_model, not {method!r}; fix: method: "
                f"draft_model, or the path of a draft made for {method}")
    if spec.model.draft_layers is None:
        return (f"{EARLY_EXIT!r} needs model.draft_layers, which is not set (the draft is cut from "
                "model.package's checkpoint); fix: set model.draft_layers, e.g. 27 "
                "(benchmarks/results/smollm2-cpu-realmodel)")
    if arm.launcher in LAUNCHERS and LAUNCHERS[arm.launcher].containers:
        return (f"{EARLY_EXIT!r} with launcher {arm.launcher}: the draft is written beside the checkpoint on "
                "this machine and a container mounts only the checkpoint; fix: launcher vllm")
    hosts = {h.name: h for h in spec.hosts}
    remote = sorted({name for name in (arm.host, *(r.host for r in arm.ranks)) if name in hosts and hosts[name].ssh})
    if remote:
        return (f"{EARLY_EXIT!r} on host(s) {', '.join(remote)}: the draft is written on this machine only; fix: "
                "run the arm here, or copy the draft there and give its path")
    return None


def workload_problems(wl: WorkloadSpec, *, stored: bool = False) -> Iterator[Problem]:
    """A workload's names and corpus (the places are within the workload): `specwatch bench` has no file."""
    if problem := _one_of("protocol", wl.protocol, PROTOCOLS):
        yield ("protocol",), problem
    for i, name in enumerate(wl.prompt_classes):
        if problem := _one_of("prompt class", name, SOURCES):
            yield ("prompt_classes", i), problem
    if wl.corpus is not None and not stored and (problem := _problem(read_corpus, wl.corpus)):
        yield ("corpus",), problem
    if problem := _one_of("client_transport", wl.client_transport, TRANSPORTS):
        yield ("client_transport",), problem


def _launches(spec: ExperimentSpec) -> Iterator[Problem]:
    """The experiment as a whole: each arm with its image (its backend's check, the container pairing),
    then each arm's launch (its launcher's check, its ranks rendered on its hosts), then the single
    variable under test, then the sweep's depths. Only the first problem: each assumes the last passed."""
    hosts = {h.name: h for h in spec.hosts}
    pairs = [(arm, spec.image(arm.image)) for arm in spec.arms]
    checks: list[Callable[[], object]] = []
    for arm, image in pairs:
        checks += [partial(BACKENDS[image.backend].check_arm, arm, image), partial(_containers, arm, image)]
    for arm, image in pairs:
        checks += [partial(LAUNCHERS[arm.launcher].check_launch, arm, image, spec), partial(_ranks_launch, arm, hosts)]
    checks += [spec.check_single_variable, spec.check_depths_fit]
    for check in checks:
        if problem := _problem(check):
            yield (), problem
            return


def _containers(arm: ArmSpec, image: ImageSpec) -> str | None:
    """Container images run only in launchers that run containers, and those run nothing else."""
    if BACKENDS[image.backend].containers == LAUNCHERS[arm.launcher].containers:
        return None
    launchers = ", ".join(sorted(n for n, launcher in LAUNCHERS.items() if launcher.containers))
    backends = ", ".join(sorted(n for n, backend in BACKENDS.items() if backend.containers))
    return (f"arm {arm.name!r}: launcher {launchers} runs container images (backend {backends}) and they run only "
            f"in it; image {arm.image!r} is backend {image.backend}, the arm's launcher {arm.launcher}")


def _ranks_launch(arm: ArmSpec, hosts: dict[str, HostSpec]) -> None:
    """RankError (a ValueError) where the arm's ranks, rendered on `hosts`, cannot launch together."""
    ranks.check_invariants(arm, ranks.render(arm, hosts))
