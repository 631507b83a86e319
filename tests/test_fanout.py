"""A cell fanned out over client processes, the worker-count rule, and every transport."""

from __future__ import annotations

import os
import statistics

import httpx
import pytest
from pydantic import ValidationError

from specwatch.bench.fanout import STREAMS_PER_WORKER, share, workers_for
from specwatch.bench.transports import TRANSPORTS
from specwatch.resolve import workload_problems
from specwatch_testing.server import run_fake_vllm
from tests.test_bench import bench, fake, workload


def test_two_workers_merge_into_one_cell_whose_window_covers_both() -> None:
    with run_fake_vllm(fake()) as url:
        # long enough for the gauge's samples (0.2 s apart)
        (cell,) = bench(url, workload(concurrency=[4], requests_per_cell=16, max_tokens=96, client_workers=2))
        truth = httpx.get(f"{url}/truth").json()
    assert not cell.rejected, cell.reject_reason
    assert cell.client is not None and cell.client.workers == 2
    assert sorted(r.index for r in cell.requests) == list(range(16))  # every prompt once, from both workers
    # one clock and one start: every request started at or after t0 and ended inside the window
    assert all(r.started_s >= 0 and r.started_s + r.e2e_s <= cell.wall_s for r in cell.requests)
    assert min(r.started_s for r in cell.requests) < 0.05  # both workers started at t0, not one after the other
    # the parent's counter window holds the tokens of both workers' requests, and the gauge saw all 4 streams
    assert cell.window.generation_tokens == cell.completion_tokens == 16 * 96
    assert cell.max_running_observed == 4
    measured = sorted(r.decode_tok_s for r in cell.requests)
    assert measured == pytest.approx(sorted(t["decode_tok_s"] for t in truth["records"][-16:]), rel=0.05)


def test_timed_cells_over_workers_never_reuse_an_index() -> None:
    with run_fake_vllm(fake()) as url:
        (cell,) = bench(url, workload(concurrency=[2], requests_per_cell=2, duration_s=1.0, max_tokens=16,
                                      client_workers=2))
    indexes = [r.index for r in cell.requests]
    assert len(indexes) > 2 and len(set(indexes)) == len(indexes)  # prompts built by both workers, none twice
    assert cell.wall_s == 1.0 and cell.window.generation_tokens >= cell.completion_tokens


def test_worker_count_follows_the_load_unless_set() -> None:
    cores = len(os.sched_getaffinity(0))
    assert workers_for(workload(concurrency=[STREAMS_PER_WORKER], requests_per_cell=64), STREAMS_PER_WORKER) == 1
    assert workers_for(workload(concurrency=[1], requests_per_cell=64), STREAMS_PER_WORKER + 1) == min(2, cores)
    assert workers_for(workload(concurrency=[1], requests_per_cell=999), 999) == cores  # never more than cores
    assert workers_for(workload(client_workers=1), 500) == 1
    assert workers_for(workload(client_workers=cores), 1) == 1  # never more workers than streams
    assert [share(5, w, 2) for w in range(2)] == [3, 2]


def test_more_workers_than_cores_is_a_one_line_error() -> None:
    cores = len(os.sched_getaffinity(0))
    with pytest.raises(ValidationError) as err:
        workload(client_workers=cores + 1)
    (e,) = err.value.errors()
    assert e["loc"] == ("client_workers",)
    assert e["msg"] == (f"Value error, client_workers {cores + 1} is more than the {cores} cores this process may "
                        f"use (os.sched_getaffinity); set client_workers <= {cores} or leave it unset (auto)")


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_every_transport_measures_the_same_truth(transport: str) -> None:
    with run_fake_vllm(fake()) as url:
        (cell,) = bench(url, workload(concurrency=[2], max_tokens=96, client_transport=transport))
        truth = httpx.get(f"{url}/truth").json()["records"][-4:]
    assert not cell.rejected, cell.reject_reason
    assert cell.client is not None and cell.client.transport == transport
    assert cell.completion_tokens == 4 * 96
    assert cell.decode_tok_s_median == pytest.approx(statistics.median(t["decode_tok_s"] for t in truth), rel=0.05)


def test_an_unknown_transport_lists_the_known_ones() -> None:
    # Parsing knows no registry; the resolve step names the transports there are.
    ((place, problem),) = workload_problems(workload(client_transport="curl"))
    assert place == ("client_transport",)
    assert problem.startswith("client_transport 'curl' is not one of aiohttp, aiohttp-uvloop")
