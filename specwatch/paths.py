"""Where specwatch keeps what a user accumulates.

`SPECWATCH_HOME` (default `~/.specwatch`) holds the DuckDB file, runs and Prefect's home;
`SPECWATCH_CACHE` (default `$SPECWATCH_HOME/cache`) holds built image venvs and generated
models, which are expensive to make and identical across homes, so a developer may share
one cache between throwaway homes.
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("SPECWATCH_HOME", "~/.specwatch")).expanduser().resolve()


def cache() -> Path:
    env = os.environ.get("SPECWATCH_CACHE")
    return Path(env).expanduser().resolve() if env else home() / "cache"


def images_dir() -> Path:
    return cache() / "images"


def models_dir() -> Path:
    return cache() / "models"


def runs_dir() -> Path:
    return home() / "runs"


def default_db() -> Path:
    return home() / "specwatch.duckdb"


def prefect_home() -> Path:
    return Path(os.environ["PREFECT_HOME"]).expanduser() if os.environ.get("PREFECT_HOME") else home() / "prefect"


def bisects_dir() -> Path:
    return home() / "bisects"


DASHBOARD_PORT = 8600


def dashboard_url() -> str:
    """Where `specwatch dashboard` is reached, for the links a notification carries: SPECWATCH_DASHBOARD_URL
    when the team serves it elsewhere."""
    return os.environ.get("SPECWATCH_DASHBOARD_URL", f"http://127.0.0.1:{DASHBOARD_PORT}").rstrip("/")
