"""The server's running-requests gauge, sampled while a cell runs: did the cell reach its concurrency?"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

import httpx

from specwatch.bench.client import Client
from specwatch.bench.metrics import kv_cache_usage, running_requests

GAUGE_PERIOD_S = 0.2
MIN_GAUGE_SAMPLES = 3


async def _polls(client: Client, stop: asyncio.Event, period_s: float) -> AsyncGenerator[str, None]:
    """The server's /metrics text every `period_s` until `stop`; the first poll waits one period
    (at the very start it would only see requests not yet admitted). A failed poll is skipped."""
    while True:
        try:
            await asyncio.wait_for(stop.wait(), period_s)
            return
        except TimeoutError:
            pass
        try:
            yield await client.metrics_text()
        except httpx.HTTPError:
            continue


async def max_running(client: Client, stop: asyncio.Event, concurrency: int) -> int | None:
    """Peak of the server's running-requests gauge while the cell runs.

    Sampled, so a floor; None when the cell was too short for MIN_GAUGE_SAMPLES samples,
    since then a low peak says nothing about whether concurrency was reached. Polling stops
    once the target was seen: every /metrics render costs the server ~5 ms of the core it
    shares with the engine (a ~3% slowdown when polled all cell long on a CPU host).
    """
    peaks: list[float] = []
    async with contextlib.aclosing(_polls(client, stop, GAUGE_PERIOD_S)) as polls:
        async for text in polls:
            if (running := running_requests(text)) is not None:
                peaks.append(running)
            if len(peaks) >= MIN_GAUGE_SAMPLES and max(peaks) >= concurrency:
                break
    return int(max(peaks)) if len(peaks) >= MIN_GAUGE_SAMPLES else None


async def kv_cache_peak(client: Client, stop: asyncio.Event, period_s: float) -> tuple[float | None, int]:
    """Peak KV-cache usage (vllm:kv_cache_usage_perc) over polls every `period_s` all cell long, and the poll count.

    Unlike the running gauge this cannot stop early, so it polls at 1 s or slower: what a
    poll costs the server is measured by benchmarks/kv_poll_cost.py.
    """
    usages = [u async for text in _polls(client, stop, period_s) if (u := kv_cache_usage(text)) is not None]
    return (max(usages) if usages else None), len(usages)
