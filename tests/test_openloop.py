"""Open-loop load: the precomputed schedule (its statistics over seeds), sends at planned times
whatever the server does, the worker seam, rate cells end to end against the fake server, and
the spec's checks on rates."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from specwatch.bench.load import LoadContext, OpenLoop, open_loop, schedule
from specwatch.bench.metrics import MetricsSnapshot, parse_metrics
from specwatch.bench.prompts import Prompt
from specwatch.bench.runner import cell_keys
from specwatch.records import CellKey
from specwatch.spec import WorkloadSpec
from specwatch_testing.server import run_fake_vllm
from tests.test_bench import bench, fake, workload
from tests.test_spec import base_doc, problems

SEEDS = range(5)  # fixed seeds: the statistics below are deterministic, so they cannot flake


def _gaps(n: int, rate: float, arrival: str = "poisson", burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    return np.diff(schedule([rate] * n, arrival, burstiness, seed, "rate/r10/code/p128"))


def test_the_planned_rate_is_the_asked_rate_exactly() -> None:
    for seed in SEEDS:
        offsets = schedule([40.0] * 1000, "poisson", 1.0, seed, "cell")
        assert len(offsets) == 1000 and offsets[0] == 0.0 and np.all(np.diff(offsets) > 0)
        assert 999 / offsets[-1] == pytest.approx(40.0, rel=1e-9)


def test_poisson_gaps_are_exponential_and_gamma_gaps_follow_burstiness() -> None:
    for seed in SEEDS:
        gaps = _gaps(4000, 10.0, seed=seed)
        assert stats.kstest(gaps, "expon", args=(0, gaps.mean())).pvalue > 0.001
        assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.1)  # exponential: CV 1
        bursty = _gaps(4000, 10.0, "gamma", 0.25, seed)
        # gamma shape b has CV 1/sqrt(b): 2 at b=0.25, i.e. burstier than Poisson at the same mean rate
        assert bursty.std() / bursty.mean() == pytest.approx(2.0, abs=0.3)
        assert stats.kstest(bursty, "gamma", args=(0.25, 0, bursty.mean() / 0.25)).pvalue > 0.001
        smooth = _gaps(4000, 10.0, "gamma", 4.0, seed)
        assert smooth.std() / smooth.mean() == pytest.approx(0.5, abs=0.05)


def test_a_schedule_is_seeded_per_cell() -> None:
    rates = [5.0] * 50
    a = schedule(rates, "poisson", 1.0, 0, "rate/r5/code/p128")
    assert a == schedule(rates, "poisson", 1.0, 0, "rate/r5/code/p128")  # every arm, every round
    assert a != schedule(rates, "poisson", 1.0, 0, "rate/r5/prose/p128")
    assert a != schedule(rates, "poisson", 1.0, 1, "rate/r5/code/p128")
    assert schedule([5.0], "poisson", 1.0, 0, "one") == [0.0] and schedule([], "poisson", 1.0, 0, "none") == []


def test_a_ramp_rises_from_its_start_to_its_end_rate() -> None:
    wl = WorkloadSpec(concurrency=[], ramp_up={"start_rps": 2, "end_rps": 20}, requests_per_cell=3000)
    (key,) = [k for k in cell_keys(wl) if k.prompt_class == "code"]
    assert key.id == "rate/r2to20/code/p128" and key.level == "r=2-20/s"
    offsets = np.array(open_loop(wl, key).offsets)
    first, last = np.diff(offsets[:300]), np.diff(offsets[-300:])
    # the local rate near each end is close to the ramp's rate there (first/last tenth: 2-3.8 and 18.2-20)
    assert 1 / first.mean() == pytest.approx(2.9, rel=0.15)
    assert 1 / last.mean() == pytest.approx(19.1, rel=0.15)


def _ctx(pool: list[tuple[int, Prompt]], send: object, worker: int = 0, workers: int = 1) -> LoadContext:
    async def snapshot() -> MetricsSnapshot:
        return parse_metrics("")

    async def make(i: int) -> Prompt:
        raise AssertionError("an open loop never makes prompts")

    return LoadContext(0, pool, make, send, snapshot, worker=worker, workers=workers)  # type: ignore[arg-type]


def test_requests_leave_at_their_planned_times_whatever_the_server_does() -> None:
    offsets = tuple(0.02 * i for i in range(10))
    sent: dict[int, tuple[float, float | None]] = {}

    async def slow_send(index: int, prompt: Prompt, scheduled: float | None = None) -> None:
        sent[index] = (time.perf_counter(), scheduled)
        await asyncio.sleep(0.5)  # far longer than the gaps: a closed loop of one would send every 0.5 s

    pool = [(i, Prompt(f"p{i}", 4, f"n{i}")) for i in range(10)]
    outcome = asyncio.run(OpenLoop(offsets).run(_ctx(pool, slow_send)))
    assert sorted(sent) == list(range(10))
    for i, (at, planned) in sent.items():
        assert planned == pytest.approx(outcome.t0 + offsets[i])
        assert 0 <= at - planned < 0.1  # on time (loose: the host is shared), never a 0.5 s wait
    assert 0.5 <= outcome.wall_s < 1.5  # the window lasts until the last request ended


def test_a_concurrency_cap_delays_sends_and_the_delay_is_lateness() -> None:
    sent: list[tuple[float, float | None]] = []

    async def slow_send(index: int, prompt: Prompt, scheduled: float | None = None) -> None:
        sent.append((time.perf_counter(), scheduled))
        await asyncio.sleep(0.1)

    pool = [(i, Prompt(f"p{i}", 4, f"n{i}")) for i in range(4)]
    asyncio.run(OpenLoop((0.0, 0.01, 0.02, 0.03), max_concurrency=1).run(_ctx(pool, slow_send)))
    late = [at - planned for at, planned in sent if planned is not None]
    # one at a time, 0.1 s each: request i leaves 0.1 * i after the first, 0.09 * i past its plan (sleeps never
    # end early; the upper bound is loose for a shared host)
    assert len(late) == 4 and all(0.09 * i - 0.005 <= x < 0.09 * i + 0.08 for i, x in enumerate(late))


def test_worker_i_of_n_sends_slots_i_i_plus_n() -> None:
    got: list[int] = []

    async def send(index: int, prompt: Prompt, scheduled: float | None = None) -> None:
        got.append(index)

    pool = [(i, Prompt(f"p{i}", 4, f"n{i}")) for i in (1, 4, 7)]  # this worker's share of the prompts
    asyncio.run(OpenLoop(tuple(0.001 * i for i in range(9))).run(_ctx(pool, send, worker=1, workers=3)))
    assert got == [1, 4, 7]


def test_rate_cells_run_beside_closed_cells_against_the_server() -> None:
    wl = workload(concurrency=[1], request_rates=[25.0], requests_per_cell=20, max_tokens=16)
    with run_fake_vllm(fake()) as url:
        closed, rate = bench(url, wl)
    assert closed.key == CellKey(concurrency=1, prompt_class="code", prompt_tokens=40)
    assert rate.cell == "rate/r25/code/p40" and rate.load_mode == "rate" and rate.concurrency is None
    assert not rate.rejected, rate.reject_reason
    assert (rate.request_rate, rate.arrival, rate.burstiness) == (25.0, "poisson", 1.0)
    assert rate.max_running_observed is None  # no concurrency to reach: the gauge is not polled
    assert all(r.scheduled_s is not None and 0 <= r.send_lateness_s < 0.1 for r in rate.requests)
    assert rate.achieved_rate == pytest.approx(25.0, rel=0.1)
    assert closed.achieved_rate is None and all(r.scheduled_s is None for r in closed.requests)
    # overlapping requests: 20 requests of ~16 steps of 8 ms at 25/s finish well before a closed loop of one would
    assert rate.wall_s < 0.9 * sum(r.e2e_s or 0 for r in rate.requests)


@pytest.mark.parametrize("rate", [0, -2.5])
def test_a_rate_of_zero_or_below_is_one_line_naming_the_field(tmp_path: Path, rate: float) -> None:
    doc = base_doc()
    doc["workload"] = {**doc.get("workload", {}), "request_rates": [4, rate]}
    (line,) = problems(tmp_path, doc)
    assert line.startswith("workload.request_rates: ") and repr(float(rate)) in line and "fix:" in line
    assert "\n" not in line


def test_open_loop_spec_checks(tmp_path: Path) -> None:
    doc = base_doc()
    doc["workload"] = {**doc.get("workload", {}), "concurrency": [], "request_rates": [2], "burstiness": 0.5}
    (line,) = problems(tmp_path, doc)
    assert "arrival: gamma" in line
    doc["workload"] = {**doc["workload"], "burstiness": 1, "ramp_up": {"start_rps": 4, "end_rps": 2}}
    (line,) = problems(tmp_path, doc)
    assert "end_rps" in line
    doc["workload"] = {**doc["workload"], "request_rates": [], "ramp_up": None}
    (line,) = problems(tmp_path, doc)
    assert "no cells" in line


def test_the_plan_counts_rate_cells_and_their_schedule() -> None:
    from specwatch.plan import plan
    from specwatch.spec import ExperimentSpec

    def spec(**workload: object) -> ExperimentSpec:
        return ExperimentSpec.model_validate({
            "name": "p", "model": {"generate": {}}, "images": [{"name": "cpu", "version": "0.32.0"}],
            "arms": [{"name": "a", "image": "cpu"}], "baseline": "a", "design": {"rounds": 1},
            "workload": {"prompt_classes": ["code"], "requests_per_cell": 100, **workload}})

    closed = plan(spec(concurrency=[4]))
    both = plan(spec(concurrency=[4], request_rates=[1.0], ramp_up={"start_rps": 1, "end_rps": 3}))
    assert [a.cells for a in closed.arms] == [1] and [a.cells for a in both.arms] == [3]
    # 100 requests at 1/s and at 1-3/s (mean 2/s) add at least 100 s + 50 s of schedule
    assert both.seconds - closed.seconds >= 150
