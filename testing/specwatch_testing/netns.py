"""Hosts on one machine for multi-rank tests: network namespaces, each joined to a bridge of this
machine by a veth pair, so ranks reach each other and the test reaches the head. Root only."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class NetnsHost:
    name: str  # the namespace
    address: str
    interface: str  # its end of the veth pair, inside the namespace


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@contextlib.contextmanager
def netns_hosts(count: int, subnet: str = "10.231.7") -> Iterator[list[NetnsHost]]:
    """`count` namespaces at SUBNET.1.. on a bridge at SUBNET.254; all removed afterwards."""
    tag = f"{os.getpid() % 100000}"
    bridge = f"swbr{tag}"
    hosts = [NetnsHost(f"sw{tag}n{i}", f"{subnet}.{i + 1}", f"swv{tag}n{i}") for i in range(count)]
    made: list[str] = []
    try:
        _ip("link", "add", bridge, "type", "bridge")
        made.append(bridge)
        _ip("addr", "add", f"{subnet}.254/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for h in hosts:
            _ip("netns", "add", h.name)
            made.append(h.name)
            peer = f"swp{tag}n{h.name[-1]}"
            _ip("link", "add", h.interface, "type", "veth", "peer", "name", peer)
            _ip("link", "set", h.interface, "netns", h.name)
            _ip("link", "set", peer, "master", bridge)
            _ip("link", "set", peer, "up")
            _ip("-n", h.name, "addr", "add", f"{h.address}/24", "dev", h.interface)
            _ip("-n", h.name, "link", "set", h.interface, "up")
            _ip("-n", h.name, "link", "set", "lo", "up")
        yield hosts
    finally:
        for name in reversed(made):  # the veth pairs go with their namespaces
            args = ("link", "del", name) if name == bridge else ("netns", "del", name)
            subprocess.run(["ip", *args], capture_output=True, timeout=30, check=False)
