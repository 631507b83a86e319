"""Checkpoint stage."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from specwatch.engine import checkpoint
from specwatch.engine.checkpoint import PythonRunner
from specwatch.records import CheckpointFacts
from specwatch.spec import ModelSpec


@task(name="prepare_checkpoint")
def prepare_checkpoint(model: ModelSpec, python: Path | PythonRunner | None = None,
                       find_links: list[Path] | None = None) -> CheckpointFacts:
    return checkpoint.prepare_checkpoint(model, python, find_links)
