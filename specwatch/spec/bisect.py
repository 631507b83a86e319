"""The bisect file (`specwatch bisect FILE`): an ordered list of images, the one arm every image runs, one
metric on a named set of cells, and the error the whole bisect may make.

Parsing only, like the experiment file: the metric and the prompt classes are checked against their
registries when the bisect is resolved (specwatch/bisect/steps.py), and each step's A/B is an ordinary
experiment built from this file.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from packaging.version import InvalidVersion, Version
from pydantic import Field, PositiveInt, field_validator, model_validator

from specwatch.spec.arms import ArmSpec, HostSpec
from specwatch.spec.base import Strict
from specwatch.spec.design import DesignSpec
from specwatch.spec.images import ImageSpec
from specwatch.spec.model import ModelSpec
from specwatch.spec.verdict import Thresholds
from specwatch.spec.workload import SamplingSpec, WorkloadSpec

MIN_IMAGES = 3  # two endpoints and at least one version between them: fewer is an A/B, not a bisect
ARM_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")  # each image's name becomes an arm's name in the step A/Bs
CELL = re.compile(r"^c=([1-9][0-9]*) ([A-Za-z0-9_-]+)$")  # a cell as reports label it: `c=1 prose`


def image_version(image: ImageSpec) -> str | None:
    """What orders an image among the others: its package version, else a docker reference's tag."""
    if image.version is not None:
        return image.version
    if image.ref is not None and ":" in image.ref.rsplit("/", 1)[-1]:
        return image.ref.rsplit(":", 1)[1]
    return None


def _identity(image: ImageSpec) -> tuple[object, ...]:
    """Two images with this equal are the same build listed twice."""
    return image.backend, image.package, image.version, image.ref, image.url, image.python, image.dockerfile


class BisectSpec(Strict):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
    description: str = ""
    model: ModelSpec
    images: list[ImageSpec] = Field(description="oldest first; the endpoints are the first and the last")
    arm: ArmSpec = Field(description="what every image runs (an arm without name and image)")
    metric: str = Field(default="decode_tok_s", description="the one judged metric (specwatch.analysis.metrics)")
    cells: Annotated[list[str], Field(min_length=1)] = Field(
        description="the judged cells, as reports label them: `c=1 prose`; every concurrency x class listed")
    error: Annotated[float, Field(gt=0, lt=0.5)] = Field(
        default=0.10, description="the bisect's family-wise rate of a wrong call, so of naming a wrong culprit; "
                                  "each step's alpha is derived from it")
    max_steps: PositiveInt | None = Field(default=None, description="the most A/Bs (endpoints, steps, "
                                          "verifications); default 2 + 2 * ceil(log2(images - 1))")
    changelog: str | None = Field(default=None, description="a URL with {version}, e.g. a release notes page")
    hosts: list[HostSpec] = Field(default_factory=list)
    workload: WorkloadSpec = WorkloadSpec()
    sampling: SamplingSpec = SamplingSpec()
    thresholds: Thresholds = Thresholds()
    design: DesignSpec = DesignSpec()

    @model_validator(mode="before")
    @classmethod
    def _filled(cls, raw: Any) -> Any:
        """The arm's name and image come per step, the workload's cells from `cells`: one written in the file
        would be silently replaced, so it is refused. The values filled in here are accepted back (a spec
        passed on as a flow parameter is validated again)."""
        if not isinstance(raw, dict):
            return raw
        out = dict(raw)
        if isinstance(raw.get("arm"), dict):
            out["arm"] = _fill("arm", raw["arm"], {"name": "arm", "image": _first_image(raw)},
                               "a bisect runs its one arm on every image in turn")
        cells = raw.get("cells")
        if isinstance(cells, list) and cells and all(isinstance(c, str) and CELL.match(c) for c in cells):
            out["workload"] = _fill("workload", raw.get("workload") or {},
                                    {"concurrency": cell_levels(cells), "prompt_classes": cell_classes(cells)},
                                    "the bisect's cells say which cells run")
        return out

    @field_validator("images")
    @classmethod
    def _ordered(cls, images: list[ImageSpec]) -> list[ImageSpec]:
        if len(images) < MIN_IMAGES:
            raise ValueError(f"{len(images)} image(s): a bisect needs at least {MIN_IMAGES} (the two endpoints and "
                             "a version between them); fix: list the versions between, or run `specwatch run` "
                             "for an A/B of two")
        for image in images:
            if not ARM_NAME.match(image.name):
                raise ValueError(f"image name {image.name!r}: it names an arm in each step; fix: use letters, "
                                 "digits, '.', '_' or '-'")
        names = [i.name for i in images]
        if dupes := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"image {dupes[0]!r} is listed twice; fix: list each version once, oldest first")
        seen: dict[tuple[object, ...], str] = {}
        for image in images:
            if (other := seen.setdefault(_identity(image), image.name)) != image.name:
                raise ValueError(f"images {other!r} and {image.name!r} are the same build; fix: list each version "
                                 "once, oldest first")
        _check_order(images)
        return images

    @field_validator("cells")
    @classmethod
    def _named_cells(cls, cells: list[str]) -> list[str]:
        for cell in cells:
            if not CELL.match(cell):
                raise ValueError(f"cell {cell!r} is not `c=<concurrency> <prompt class>`; fix: write e.g. "
                                 "'c=1 prose'")
        if len(set(cells)) != len(cells):
            raise ValueError(f"{cells} names a cell twice; fix: list each once")
        levels, classes = cell_levels(cells), cell_classes(cells)
        if len(cells) != len(levels) * len(classes):
            missing = [f"c={c} {p}" for c in levels for p in classes if f"c={c} {p}" not in cells]
            raise ValueError(f"cells {cells} are not every concurrency with every prompt class (the workload runs "
                             f"them all), {missing[0]!r} is missing; fix: add it, or bisect twice")
        return cells

    @field_validator("changelog")
    @classmethod
    def _changelog(cls, url: str | None) -> str | None:
        if url is not None and "{version}" not in url:
            raise ValueError(f"{url!r} has no {{version}}; fix: write where {{version}} goes, e.g. "
                             "https://github.com/vllm-project/vllm/releases/tag/v{version}")
        return url

    @model_validator(mode="after")
    def _budget(self) -> BisectSpec:
        if self.max_steps is not None and self.max_steps < MIN_IMAGES:
            raise ValueError(f"max_steps={self.max_steps}: the endpoints, one step and one verification take "
                             f"{MIN_IMAGES} A/Bs; fix: set max_steps >= {MIN_IMAGES}, or leave it out")
        return self


def _fill(section: str, given: Any, filled: dict[str, Any], why: str) -> Any:
    if not isinstance(given, dict):
        return given  # not a mapping: validation names it
    for key, value in filled.items():
        if key in given and given[key] != value:
            raise ValueError(f"{section}.{key}: {why}; fix: remove {section}.{key}")
    return {**given, **filled}


def _first_image(raw: dict[str, Any]) -> str:
    images = raw.get("images")
    first = images[0] if isinstance(images, list) and images else None
    return str(first.get("name", "")) if isinstance(first, dict) else ""


def _check_order(images: list[ImageSpec]) -> None:
    """Versions must rise. Images without a version (a python environment, an endpoint) keep the order given."""
    versions = [(image.name, v) for image in images if (v := image_version(image)) is not None]
    parsed = []
    for name, text in versions:
        try:
            parsed.append((name, text, Version(text)))
        except InvalidVersion:
            return  # a tag such as `nightly` orders nothing: the list's order is the user's
    for (prev_name, prev_text, prev), (name, text, now) in zip(parsed, parsed[1:], strict=False):
        if now <= prev:
            raise ValueError(f"image {name!r} ({text}) comes after {prev_name!r} ({prev_text}) but is not newer; "
                             "fix: list the versions oldest first, each once")


def cell_levels(cells: list[str]) -> list[int]:
    """The concurrencies the named cells run at, ascending."""
    return sorted({int(m.group(1)) for c in cells if (m := CELL.match(c))})


def cell_classes(cells: list[str]) -> list[str]:
    """The prompt classes of the named cells, in the order first named."""
    return list(dict.fromkeys(m.group(2) for c in cells if (m := CELL.match(c))))
