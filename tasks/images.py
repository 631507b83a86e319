"""Image stage."""

from __future__ import annotations

from prefect import task

from specwatch.engine.images import backend_for
from specwatch.records import ImageRef
from specwatch.spec import ImageSpec


@task(name="build_image")
def build_image(spec: ImageSpec) -> ImageRef:
    return backend_for(spec).ensure(spec)
