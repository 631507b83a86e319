"""Prefect settings specwatch needs, applied before prefect is first imported."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from specwatch import paths


def configure() -> None:
    """Defaults only: anything the user already set wins."""
    os.environ.setdefault("PREFECT_HOME", str(paths.prefect_home()))
    # Prefect creates its home without parents: on a fresh machine SPECWATCH_HOME does not exist yet.
    Path(os.environ["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)
    # Offline hosts: the server otherwise logs a telemetry ERROR on every start.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # A cold ephemeral API takes 10-12 s here; the default 20 s leaves no margin on a busy host.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    # specwatch's own loggers show up in the flow-run logs (and the UI).
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "specwatch")
    # ...and the same loggers used outside a flow (CLI, tests) stay local instead of warning.
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    # Per-cell progress is logged at INFO; the stdlib default (WARNING) would hide it.
    logging.getLogger("specwatch").setLevel(logging.INFO)
