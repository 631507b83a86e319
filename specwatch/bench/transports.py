"""Client transports, by name (`workload.client_transport`): what carries httpx's requests, and
which event loop runs the client.

httpx stays the client API everywhere; a transport only replaces what sits under
`httpx.AsyncClient` (its connection pool and HTTP/1.1 parser) and the event loop. The default is
picked by `benchmarks/client_capacity.py` (README there, section 2): per SSE read httpx's own
transport spends most of the client's CPU in httpcore/anyio, aiohttp's parser far less.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

T = TypeVar("T")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def _default_loop() -> asyncio.AbstractEventLoop:
    return asyncio.new_event_loop()


def _uvloop() -> asyncio.AbstractEventLoop:
    import uvloop

    return uvloop.new_event_loop()


def _httpcore(limits: httpx.Limits) -> httpx.AsyncBaseTransport:
    return httpx.AsyncHTTPTransport(limits=limits)


def _aiohttp(limits: httpx.Limits) -> httpx.AsyncBaseTransport:
    from httpx_aiohttp import AiohttpTransport

    return AiohttpTransport(limits=limits)


@dataclass(frozen=True)
class Transport:
    name: str
    make: Callable[[httpx.Limits], httpx.AsyncBaseTransport]
    loop: LoopFactory


TRANSPORTS: dict[str, Transport] = {}


def register(transport: Transport) -> Transport:
    TRANSPORTS[transport.name] = transport
    return transport


def transport_for(name: str) -> Transport:
    try:
        return TRANSPORTS[name]
    except KeyError:
        raise KeyError(f"unknown client transport {name!r}; known: {', '.join(sorted(TRANSPORTS))}") from None


register(Transport("httpx", _httpcore, _default_loop))
register(Transport("httpx-uvloop", _httpcore, _uvloop))
register(Transport("aiohttp", _aiohttp, _default_loop))
register(Transport("aiohttp-uvloop", _aiohttp, _uvloop))


def run_on_loop(name: str, coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on the event loop transport `name` asks for."""
    with asyncio.Runner(loop_factory=transport_for(name).loop) as runner:
        return runner.run(coro)
