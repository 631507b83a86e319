"""Image stage."""

from __future__ import annotations

from typing import Any

from prefect import task

from specwatch.engine.images.registry import backend_for
from specwatch.records import ImageRef
from specwatch.spec import ImageSpec

# What a download or build says when the network, not the image, failed: only these are retried.
TRANSIENT = ("timed out", "timeout", "connection reset", "connection refused", "temporary failure in name resolution",
             "connection aborted", "remote end closed", "503 service unavailable", "502 bad gateway", "toomanyrequests")


def transient(message: str) -> bool:
    low = message.lower()
    return any(marker in low for marker in TRANSIENT)


def _retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """A build is safe to repeat (a cached venv or image is reused), but a wrong version fails the same way again."""
    return transient(str(state.message or ""))


@task(name="build_image", retries=2, retry_delay_seconds=[10, 60], retry_condition_fn=_retry_transient)
def build_image(spec: ImageSpec) -> ImageRef:
    return backend_for(spec).ensure(spec)
