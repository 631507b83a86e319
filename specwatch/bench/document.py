"""The `specwatch bench --json` document: what was asked, and every cell's flat summary."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import specwatch
from specwatch.bench.gates import Gates
from specwatch.records import CellResult
from specwatch.spec import SamplingSpec, WorkloadSpec


def bench_document(endpoint: str, model: str, started: datetime, ended: datetime, workload: WorkloadSpec,
                   sampling: SamplingSpec, gates: Gates, cells: list[CellResult]) -> dict[str, Any]:
    return {
        "specwatch_version": specwatch.__version__, "endpoint": endpoint, "model": model,
        "started_at": started.isoformat(), "ended_at": ended.isoformat(),
        "sampling": sampling.model_dump(), "workload": workload.model_dump(mode="json"),
        "max_prefix_cache_hit_rate": gates.max_prefix_cache_hit_rate,
        "cells": [c.summary() for c in cells],
    }
