"""Which nonces a launch sends: the same in every launch of a run (common random numbers over arms and
rounds), unless a server outlives its launch.

A launch's namespace seeds every nonce it sends (bench/prompts.py `nonce`), and request ids are
`<namespace>/<cell>/<index>`. Bodies are seeded by workload.seed and request index alone, so two
launches with one namespace send the identical request sequence: same nonces, bodies and order.

Nonces must stay unique within one server's life (measurement rule 1). A server that an arm boots
is fresh, so every launch of every round shares `<run>`: round b sends what round 1 sent. A new
nonce would re-draw what the model writes (greedy output follows the whole prompt), and with it
how much of it speculation accepts: on the real model, one request's k5-vs-nospec speed-up went
from 1.66 to 0.01 (log) between rounds on nonce alone (benchmarks section 12), noise the rounds
would then have to average away. The estimate is over launches for this request set; what it says
beyond the set grows with requests_per_cell, not with rounds.

An arm whose launcher boots nothing (an endpoint) reaches a server that lives on, so each round
gets `<run>:b<round>` (the `b`, from when a round was called a block, stays: a resumed run's nonces
must be the ones its earlier launches sent); where another arm of the run reaches the same one (an
A/A against one endpoint), its prefix cache would serve the second arm from the first arm's prompts,
so each such arm adds its own name and sends nonces of its own (the bodies and their order stay common).
"""

from __future__ import annotations

from collections import Counter
from typing import Literal
from urllib.parse import urlsplit

from specwatch.engine.launchers.registry import launcher_for
from specwatch.spec import ExperimentSpec

# One machine's loopback under the names a spec may use for it.
_LOOPBACK = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}
_DEFAULT_PORTS = {"http": 80, "https": 443}


def server_of(url: str) -> str:
    """A running server's identity from its URL: scheme, host (loopback under one name), port, path."""
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower()
    host = "loopback" if host in _LOOPBACK else host
    port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 0)
    return f"{parts.scheme}://{host}:{port}{parts.path.rstrip('/')}"


def sharing_a_server(spec: ExperimentSpec) -> frozenset[str]:
    """The arms that boot no server of their own and reach one that another arm of `spec` reaches too.

    Servers are told apart by URL: two URLs that name one server by different host names are not seen
    as one, and then the prefix-cache gate (measurement rule 1) rejects the second arm's cells.
    """
    servers: dict[str, str] = {}
    for arm in spec.arms:
        image = spec.image(arm.image)
        if not launcher_for(arm, image).boots and image.url:
            servers[arm.name] = server_of(image.url)
    reached = Counter(servers.values())
    return frozenset(name for name, server in servers.items() if reached[server] > 1)


NonceScope = Literal["run", "round", "arm"]  # what a launch's nonces are unique to: see the module doc


def nonce_scopes(spec: ExperimentSpec) -> dict[str, NonceScope]:
    """Each arm's nonce scope: the run for a server it boots, else the round, else its own where it shares one."""
    shared = sharing_a_server(spec)
    return {arm.name: "arm" if arm.name in shared else "run" if launcher_for(arm, spec.image(arm.image)).boots
            else "round" for arm in spec.arms}


def launch_namespace(run_id: str, round_no: int, arm: str, scope: NonceScope) -> str:
    """The nonce namespace of arm `arm`'s launch in round `round_no`: see the module doc."""
    if scope == "run":
        return run_id
    common = f"{run_id}:b{round_no}"
    return f"{common}:{arm}" if scope == "arm" else common
