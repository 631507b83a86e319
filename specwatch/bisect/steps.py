"""Each step's A/B, built from the bisect file as an ordinary experiment (as specwatch/calibrate.py builds an
A/A): the two images' arms are the file's one arm, the image is the one variable, the metric is the only one
judged, the cells are the named ones, and alpha is the step's share of the bisect's error."""

from __future__ import annotations

from typing import Any

from specwatch.analysis.bisection import Pair, default_max_steps, step_alpha
from specwatch.analysis.metrics import unknown_metrics
from specwatch.bench.prompts import SOURCES
from specwatch.resolve import resolve
from specwatch.spec import BisectSpec, ExperimentSpec, ImageSpec, SpecError, problem_line
from specwatch.spec.bisect import CELL, image_version


def max_steps(spec: BisectSpec) -> int:
    return spec.max_steps or default_max_steps(len(spec.images))


def alpha_of(spec: BisectSpec) -> float:
    return step_alpha(spec.error, max_steps(spec))


def step_experiment(spec: BisectSpec, pair: Pair) -> ExperimentSpec:
    """The A/B of version `pair.older` (the baseline) against version `pair.newer`."""
    return _experiment(spec, [spec.images[pair.older], spec.images[pair.newer]], f"{pair.kind}.")


def resolve_bisect(spec: BisectSpec, source: str | None = None) -> BisectSpec:
    """`spec` checked against the registries; SpecError with one line per problem. The metric and the cells
    are checked by their own fields; the images and the arm as an A/B of every image would check them."""
    problems = []
    if problem := unknown_metrics([spec.metric]):
        problems.append(problem_line(("metric",), {}, f"{problem}; fix: use one of those names"))
    for i, cell in enumerate(spec.cells):
        m = CELL.match(cell)
        if m and m.group(2) not in SOURCES:
            problems.append(problem_line(("cells", i), {"cells": spec.cells}, f"prompt class {m.group(2)!r} is not "
                                         f"one of {', '.join(sorted(SOURCES))}; fix: use one of those"))
    if problems:
        raise SpecError(source or spec.name, problems)
    resolve(_experiment(spec, spec.images, ""), source=source or spec.name)
    return spec


class FollowUpError(ValueError):
    """An A/B that a bisect cannot follow (not one image against another); one line with its fix."""


def bisect_after(spec: ExperimentSpec, versions: list[str]) -> BisectSpec:
    """The bisect that follows an image-vs-image A/B (the nightly's REVERT): its baseline's image, `versions`
    of the same build between (the deployment lists them: a GPU host has no package index), its candidate's
    image; the baseline arm on every image; the lead metric on the A/B's closed-loop cells."""
    base = spec.arm(spec.baseline)
    others = [a for a in spec.arms if a.name != spec.baseline]
    if len(others) != 1 or others[0].image == base.image:
        raise FollowUpError(f"experiment {spec.name}: a bisect follows an A/B of one image against another; fix: "
                            "give the nightly two arms on two images")
    older, newer = spec.image(base.image), spec.image(others[0].image)
    between = [_at_version(older, v) for v in versions]
    cells = [f"c={c} {p}" for c in spec.workload.concurrency for p in spec.workload.prompt_classes]
    workload = spec.workload.model_dump(exclude={"concurrency", "prompt_classes"})
    return BisectSpec.model_validate({
        "name": f"{spec.name}.bisect", "description": f"after {spec.name}: {older.name} .. {newer.name}",
        "model": spec.model.model_dump(), "images": [i.model_dump() for i in (older, *between, newer)],
        "arm": base.model_dump(exclude={"name", "image"}), "metric": spec.verdict.metrics[0], "cells": cells,
        "hosts": [h.model_dump() for h in spec.hosts], "workload": workload, "sampling": spec.sampling.model_dump(),
        "thresholds": spec.thresholds.model_dump(), "design": spec.design.model_dump(exclude={"varies"})})


def _at_version(image: ImageSpec, version: str) -> ImageSpec:
    """The same build at another version: a package version, or a docker reference's tag."""
    ref = f"{image.ref.rsplit(':', 1)[0]}:{version}" if image.ref else None
    return image.model_copy(update={"name": f"{image.package}-{version}", "version": version if not ref else
                                    image.version, "ref": ref})


def version_of(image: ImageSpec) -> str:
    """How a report names an image's version: its package version or tag, else the image's name."""
    return image_version(image) or image.name


def changelog(spec: BisectSpec, image: ImageSpec) -> str | None:
    version = image_version(image)
    return spec.changelog.replace("{version}", version) if spec.changelog and version else None


def _experiment(spec: BisectSpec, images: list[ImageSpec], tag: str) -> ExperimentSpec:
    arms = [{**spec.arm.model_dump(), "name": image.name, "image": image.name} for image in images]
    design = {**spec.design.model_dump(), "alpha": alpha_of(spec), "varies": ["image"], "allow_confounded": False}
    doc: dict[str, Any] = {
        "name": f"{spec.name}.{tag}{images[0].name}-vs-{images[-1].name}" if tag else spec.name,
        "description": spec.description, "model": spec.model.model_dump(),
        "hosts": [h.model_dump() for h in spec.hosts],
        "images": [i.model_dump() for i in images], "arms": arms, "baseline": images[0].name,
        "workload": spec.workload.model_dump(), "sampling": spec.sampling.model_dump(),
        "thresholds": spec.thresholds.model_dump(),
        "design": design, "verdict": {"metrics": [spec.metric]},
    }
    # Through model_validate, not model_copy: the step must pass the experiment's own checks.
    return ExperimentSpec.model_validate(doc)
