"""The one readiness wait: poll a health URL until it answers 200, while watching the process."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx


class NotReady(Exception):
    """The server did not answer in time."""


class ExitedBeforeReady(NotReady):
    """The watched process ended while we waited for it (it refused its configuration, say)."""


def wait_healthy(
    url: str,
    timeout_s: float,
    exited: Callable[[], int | None] = lambda: None,
    poll_s: float = 1.0,
) -> float:
    """Seconds until `url` answered 200. `exited` returns the exit code once the process ended."""
    t0 = time.monotonic()
    with httpx.Client(timeout=min(5.0, max(poll_s * 10, 0.5))) as http:
        while True:
            code = exited()
            if code is not None:
                raise ExitedBeforeReady(f"exited with code {code} before {url} answered")
            try:
                if http.get(url).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            if time.monotonic() - t0 > timeout_s:
                raise NotReady(f"{url} not ready after {timeout_s:.0f}s")
            time.sleep(poll_s)
