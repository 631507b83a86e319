"""The server's running-requests gauge, sampled while a cell runs: did the cell reach its concurrency?"""

from __future__ import annotations

import asyncio

import httpx

from specwatch.bench.client import Client

GAUGE_PERIOD_S = 0.2
MIN_GAUGE_SAMPLES = 3


async def max_running(client: Client, stop: asyncio.Event, concurrency: int) -> int | None:
    """Peak of the server's running-requests gauge while the cell runs.

    Sampled, so a floor; None when the cell was too short for MIN_GAUGE_SAMPLES samples,
    since then a low peak says nothing about whether concurrency was reached. Polling stops
    once the target was seen: every /metrics render costs the server ~5 ms of the core it
    shares with the engine (a ~3% slowdown when polled all cell long on a CPU host).
    """
    peaks: list[float] = []
    while True:
        # Wait first: a poll at the very start would only see requests not yet admitted.
        try:
            await asyncio.wait_for(stop.wait(), GAUGE_PERIOD_S)
            break
        except TimeoutError:
            pass
        try:
            running = await client.running()
        except httpx.HTTPError:
            continue
        if running is not None:
            peaks.append(running)
        if len(peaks) >= MIN_GAUGE_SAMPLES and max(peaks) >= concurrency:
            break
    return int(max(peaks)) if len(peaks) >= MIN_GAUGE_SAMPLES else None
