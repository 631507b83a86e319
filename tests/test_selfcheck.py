"""The client's self-check: its figures, the "client saturated" gate, and a planted starvation."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

import pytest

from specwatch.bench.client import BenchTarget
from specwatch.bench.gates import Gates, gate
from specwatch.bench.runner import InProcess, prepare
from specwatch.bench.selfcheck import SelfCheck, WorkerCheck, merge, saturation
from specwatch.records import CellResult, ClientCheck, RequestSample, SpecWindow
from specwatch.spec import SamplingSpec, WorkloadSpec
from specwatch_testing.server import run_fake_vllm
from tests.test_bench import MODEL, fake


def test_merge_takes_quantiles_over_all_workers_and_the_busiest_cpu() -> None:
    a = WorkerCheck(loop_lag_s=[0.001] * 100, stamp_delay_s=[0.0002] * 10, cpu_s=0.3, wall_s=1.0)
    b = WorkerCheck(loop_lag_s=[0.003] * 99 + [0.050], stamp_delay_s=[0.0004] * 10, cpu_s=0.8, wall_s=1.0)
    check = merge([a, b], "aiohttp", [])
    assert check.workers == 2 and check.transport == "aiohttp"
    assert check.loop_lag_ms_p50 == pytest.approx(2.0)  # between the two workers' halves
    assert check.loop_lag_ms_max == pytest.approx(50.0)
    assert check.stamp_delay_ms_p99 == pytest.approx(0.4)
    assert check.cpu_share_max == pytest.approx(0.8)
    assert check.send_lateness_ms_p99 is None  # closed loop: no planned send times


def test_saturation_names_each_figure_over_its_threshold() -> None:
    check = ClientCheck(workers=1, transport="httpx", loop_lag_ms_p99=30.0, stamp_delay_ms_p99=1.0,
                        cpu_share_max=0.95, send_lateness_ms_p99=2.0)
    assert saturation(check, 20.0, 0.9, 10.0) == [
        "loop lag p99 30.0ms > 20ms (thresholds.client_loop_lag_ms)",
        "CPU share 0.95 > 0.9 (thresholds.client_cpu_share)",
    ]
    assert saturation(check, 50.0, 0.99, 10.0) == []


def test_self_check_sees_a_blocked_loop() -> None:
    async def blocked() -> WorkerCheck:
        async with SelfCheck() as check:
            await asyncio.sleep(0.05)
            end = time.process_time() + 0.1
            while time.process_time() < end:  # 0.1 s of CPU on the loop: the sleeper and the probe wake late
                pass
            await asyncio.sleep(0.05)
        return check.result

    got = asyncio.run(blocked())
    assert max(got.loop_lag_s) > 0.08
    assert max(got.stamp_delay_s) > 0.05
    assert got.cpu_s >= 0.1 and got.cpu_share == pytest.approx(got.cpu_s / got.wall_s)


def _burst_cell(client: ClientCheck | None) -> CellResult:
    reqs = [RequestSample(index=i, prompt_tokens=10, status="ok", completion_tokens=33, decode_s=1.0, chunks=20,
                          arrival_groups=2) for i in range(4)]
    return CellResult(concurrency=1, prompt_class="code", prompt_tokens=10, max_tokens=33, wall_s=4.0,
                      window=SpecWindow(), requests=reqs, client=client)


def test_a_saturated_client_replaces_the_burst_reason() -> None:
    healthy = ClientCheck(workers=1, transport="aiohttp", loop_lag_ms_p99=1.0, cpu_share_max=0.2)
    server_burst = gate(_burst_cell(healthy), Gates())
    assert server_burst.rejected and "arrived in one burst" in server_burst.reject_reason
    assert "client saturated" not in server_burst.reject_reason
    starved = gate(_burst_cell(healthy.model_copy(update={"loop_lag_ms_p99": 300.0})), Gates())
    assert starved.rejected and starved.reject_reason.startswith("client saturated (loop lag p99 300.0ms > 20ms")
    assert "burst" not in starved.reject_reason


def _measure(url: str) -> CellResult:
    """In a fresh process: warm up, then measure one cell."""
    wl = WorkloadSpec(prompt_classes=["code"], prompt_tokens=40, max_tokens=32, concurrency=[2], requests_per_cell=4,
                      warmup_requests=1, read_timeout_s=60.0)
    target = BenchTarget(url, MODEL, f"starve-{time.time_ns()}")
    asyncio.run(prepare(target, wl, SamplingSpec()))
    (cell,) = InProcess().measure(target, wl, SamplingSpec(), Gates())
    return cell


@contextlib.contextmanager
def _starved(pid: int, stopped_s: float = 0.06, running_s: float = 0.04) -> Iterator[None]:
    """The kernel runs `pid` for only `running_s` of every `stopped_s + running_s` (SIGSTOP, SIGCONT): the tens
    of ms between turns that a client starved of CPU gets, at a pace this sets rather than the host's load.
    (A niceness-19 client beside a busy sibling got ~1.5% of a core; on a loaded CI host its cell ran for
    minutes or its connects timed out, CI stop 29.)"""
    done = threading.Event()

    def cycle() -> None:
        while not done.is_set():
            os.kill(pid, signal.SIGSTOP)
            time.sleep(stopped_s)
            os.kill(pid, signal.SIGCONT)
            done.wait(running_s)

    stopper = threading.Thread(target=cycle, daemon=True)
    stopper.start()
    try:
        yield
    finally:
        done.set()
        stopper.join()
        os.kill(pid, signal.SIGCONT)


def test_a_client_starved_of_cpu_is_rejected_as_saturated_and_a_healthy_one_is_not() -> None:
    # One client process for both runs, warmed up by the healthy run, then the same cell starved.
    with run_fake_vllm(fake("--step-ms", "2")) as url, \
            ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        healthy = pool.submit(_measure, url).result()
        with _starved(pool.submit(os.getpid).result()):
            starved = pool.submit(_measure, url).result()
    assert not healthy.rejected, healthy.reject_reason
    assert healthy.client is not None and healthy.client.loop_lag_ms_p99 is not None
    assert healthy.client.loop_lag_ms_p99 < Gates().client_loop_lag_ms
    assert starved.rejected and starved.reject_reason.startswith("client saturated (loop lag p99")
    assert starved.client is not None and (starved.client.loop_lag_ms_p99 or 0) > Gates().client_loop_lag_ms
