"""specwatch's own run ids: sortable by time, unique by a short random suffix."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime


def new_run_id(now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}"
