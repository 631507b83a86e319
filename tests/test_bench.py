"""The benchmark client against a real HTTP server that knows its own truth (specwatch_testing.fake_vllm)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from specwatch.bench.client import BenchError, BenchTarget, Client
from specwatch.bench.gates import Gates, gate
from specwatch.bench.prompts import user
from specwatch.bench.runner import CellsAborted, InProcess, prepare
from specwatch.records import CellResult, RequestSample, SpecWindow
from specwatch.spec import SamplingSpec, WorkloadSpec
from specwatch_testing.experiments import LOOSE_CLIENT_GATES
from specwatch_testing.server import run_fake_vllm

MODEL = "demo"
K = 4
SPEC = json.dumps({"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 4})
PROBS = "0.9,0.8,0.7,0.6"


def fake(*extra: str) -> list[str]:
    return ["--served-model-name", MODEL, "--spec-config", SPEC, "--accept-probs", PROBS, "--step-ms", "8", *extra]


def workload(**kw: object) -> WorkloadSpec:
    base = dict(prompt_classes=["code"], prompt_tokens=40, max_tokens=48, concurrency=[1], requests_per_cell=4,
                warmup_requests=1, read_timeout_s=30.0)
    return WorkloadSpec(**{**base, **kw})


def bench(url: str, wl: WorkloadSpec, namespace: str = "t1") -> list[CellResult]:
    target = BenchTarget(url, MODEL, namespace)
    asyncio.run(prepare(target, wl, SamplingSpec()))
    # The client-health gates have their own tests (test_selfcheck); here they would judge the host, whose
    # second core the session's background image build shares (CI stops 27 and 28: a 22 ms loop lag, a 0.96
    # CPU share), and a saturated client's reason replaces the one a test is about.
    gates = Gates(0.01, wl.repetition_flag_ratio, **LOOSE_CLIENT_GATES)
    return InProcess().measure(target, wl, SamplingSpec(), gates)


def test_tokens_come_from_usage_and_rates_match_the_servers_truth() -> None:
    with run_fake_vllm(fake()) as url:
        (cell,) = bench(url, workload())
        truth = httpx.get(f"{url}/truth").json()["records"][-4:]
    assert not cell.rejected, cell.reject_reason
    assert cell.completion_tokens == 4 * 48
    # Several tokens per chunk under speculation: a chunk-counting client would undercount.
    assert all(r.chunks < r.completion_tokens for r in cell.requests)
    true_rate = sorted(t["decode_tok_s"] for t in truth)
    measured = sorted(r.decode_tok_s for r in cell.requests)
    assert measured == pytest.approx(true_rate, rel=0.05)


def test_prompts_are_calibrated_and_nonce_fronted() -> None:
    with run_fake_vllm(fake()) as url:
        (cell,) = bench(url, workload(prompt_tokens=64))
    assert all(63 <= r.prompt_tokens <= 64 for r in cell.requests)
    assert cell.window.prefix_cache_hit_rate == 0.0


def test_counters_are_windowed_per_cell_not_lifetime() -> None:
    with run_fake_vllm(fake()) as url:
        cells = bench(url, workload(concurrency=[1, 2], requests_per_cell=3))
    # warm-up and the first cell moved the counters before the second cell started
    assert [c.window.generation_tokens for c in cells] == [3 * 48, 3 * 48]
    for c in cells:
        w = c.window
        assert w.num_draft_tokens == K * w.num_drafts
        assert sum(w.accepted_per_position) == w.num_accepted_tokens
        assert 1.0 < w.mean_acceptance_length <= K + 1
        assert c.server_aggregate_tok_s == pytest.approx(c.aggregate_tok_s)


def test_concurrency_is_observed() -> None:
    with run_fake_vllm(fake()) as url:
        (cell,) = bench(url, workload(concurrency=[4], requests_per_cell=8, max_tokens=300))
    assert cell.max_running_observed == 4
    assert not cell.rejected


def test_replayed_prompts_hit_the_prefix_cache_and_are_rejected() -> None:
    with run_fake_vllm(fake()) as url:
        (first,) = bench(url, workload(warmup_requests=0), namespace="same")
        (again,) = bench(url, workload(warmup_requests=0), namespace="same")
    assert not first.rejected
    assert again.rejected and "prefix-cache hit rate" in again.reject_reason
    assert again.window.prefix_cache_hit_rate > 0.5


def test_failed_requests_reject_the_cell_with_the_reason() -> None:
    with run_fake_vllm(fake("--fail-every", "3")) as url:
        (cell,) = bench(url, workload(warmup_requests=0, requests_per_cell=6))
    assert cell.requests_failed == 2
    assert cell.rejected and "2 of 6 requests failed" in cell.reject_reason and "HTTP 500" in cell.reject_reason
    assert cell.completion_tokens == 4 * 48  # failed requests are not averaged in


def test_client_read_timeout_is_reported_as_such() -> None:
    with run_fake_vllm(fake("--stall-after-tokens", "5")) as url, pytest.raises(CellsAborted) as aborted:
        bench(url, workload(warmup_requests=0, requests_per_cell=1, read_timeout_s=0.5))
    # the hung cell is kept, rejected with its reason, and no later cell waits out the same timeout
    assert aborted.value.measured and "client timeout" in str(aborted.value)
    (cell,) = aborted.value.cells
    (req,) = cell.requests
    assert req.status == "timeout" and "client timeout" in req.error and "read_timeout_s" in req.error
    assert req.error_kind == "timeout" and cell.rejected and "timeout: 1" in cell.reject_reason


def test_down_server_is_a_bench_error() -> None:
    with pytest.raises(BenchError, match="not answering"):
        bench("http://127.0.0.1:9", workload())


def test_wrong_model_name_is_a_bench_error() -> None:
    with run_fake_vllm(["--served-model-name", "other"]) as url, pytest.raises(BenchError, match="not served"):
        bench(url, workload())


def _cell(running: int | None, hits: float, rep: float, concurrency: int = 4) -> CellResult:
    reqs = [RequestSample(index=0, prompt_tokens=10, status="ok", completion_tokens=8, decode_s=1.0,
                          repetition_ratio=rep)]
    return CellResult(concurrency=concurrency, prompt_class="code", prompt_tokens=10, max_tokens=8, wall_s=1.0,
                      window=SpecWindow(prefix_cache_hits=hits, prefix_cache_queries=100.0),
                      max_running_observed=running, requests=reqs)


def test_gate_reasons_and_repetition_flag() -> None:
    assert not gate(_cell(4, 0.0, 0.1), Gates(0.01, 0.5)).rejected
    low = gate(_cell(2, 0.0, 0.1), Gates(0.01, 0.5))
    assert low.rejected and "concurrency 4 never reached (max running observed 2)" in low.reject_reason
    cached = gate(_cell(4, 1.0, 0.1), Gates(0.01, 0.5))
    assert cached.rejected and "1.0%" in cached.reject_reason
    looped = gate(_cell(4, 0.0, 0.8), Gates(0.01, 0.5))
    assert not looped.rejected
    assert looped.flags == ["acceptance may be inflated by repetition (median repetition ratio 0.80)"]


def test_streams_delivered_in_one_burst_reject_the_cell() -> None:
    # zero step time: every chunk is ready at once, as when vLLM's API server buffers a fast engine
    with run_fake_vllm(fake("--step-ms", "0")) as url:
        (cell,) = bench(url, workload(warmup_requests=0))
    assert all(r.coalesced for r in cell.requests)
    assert cell.rejected and "4 of 4 streams arrived in one burst" in cell.reject_reason


def test_duration_mode_counts_only_requests_inside_the_window() -> None:
    with run_fake_vllm(fake()) as url:
        (cell,) = bench(url, workload(concurrency=[2], requests_per_cell=2, duration_s=1.0, max_tokens=32))
    assert cell.wall_s == 1.0
    assert cell.requests_ok > 2  # the pool of 2 ran dry and more prompts were built
    assert all(r.started_s >= 0 and r.started_s + r.e2e_s <= 1.0 for r in cell.requests)
    # the server's counter also saw the requests still running at the deadline
    assert cell.window.generation_tokens >= cell.completion_tokens


def test_a_few_burst_streams_are_left_out_of_decode_figures_and_many_reject() -> None:
    def cell(bursts: int) -> CellResult:
        reqs = [RequestSample(index=i, prompt_tokens=10, status="ok", completion_tokens=33, decode_s=1.0, chunks=20,
                              arrival_groups=2 if i < bursts else 20) for i in range(8)]
        reqs[0] = reqs[0].model_copy(update={"decode_s": 0.001}) if bursts else reqs[0]
        return CellResult(concurrency=1, prompt_class="code", prompt_tokens=10, max_tokens=33, wall_s=8.0,
                          window=SpecWindow(), requests=reqs)

    few = gate(cell(2), Gates(0.01, 0.5))
    assert not few.rejected and few.decode_tok_s_median == pytest.approx(32.0)  # the burst's 32000 tok/s is out
    many = gate(cell(3), Gates(0.01, 0.5))
    assert many.rejected and "3 of 8 streams arrived in one burst" in many.reject_reason


def test_two_events_per_step_is_not_a_burst() -> None:
    # a server that sends two SSE events per engine step: half the gaps are ~0, every step still timed
    paired = RequestSample(index=0, prompt_tokens=10, status="ok", completion_tokens=64, decode_s=1.0, chunks=100,
                           arrival_groups=50)
    burst = paired.model_copy(update={"arrival_groups": 3})
    assert not paired.coalesced and paired.decode_tok_s == pytest.approx(63.0)
    assert burst.coalesced and burst.decode_tok_s is None


@pytest.mark.parametrize(("concurrency", "peak", "share", "rejected"), [
    (64, 61, 0.9, False),   # the H200's c=64 cells: a sampled gauge one or three slots short
    (64, 57, 0.9, True),    # below ceil(0.9 x 64) = 58
    (64, 63, 1.0, True),    # min_running_share 1: every slot at once
    (16, 15, 0.9, False),
    (1, 0, 0.9, True),      # c=1 needs its one request seen running
    (10, 9, 0.9, False),    # 0.9 x 10 is 9 exactly, not 9.000000000000002 rounded up
])
def test_concurrency_counts_as_reached_at_min_running_share(concurrency: int, peak: int, share: float,
                                                             rejected: bool) -> None:
    cell = gate(_cell(peak, 0.0, 0.1, concurrency), Gates(min_running_share=share))
    assert cell.rejected is rejected
    if rejected:
        assert f"concurrency {concurrency} never reached (max running observed {peak}): below" in cell.reject_reason


def test_min_waves_gives_a_high_concurrency_cell_several_waves_and_leaves_the_others() -> None:
    """c=1 keeps requests_per_cell; c=4 with min_waves 3 sends 12, so the batch of 4 is held, not one burst."""
    wl = workload(concurrency=[1, 4], requests_per_cell=4, min_waves=3, max_tokens=16)
    with run_fake_vllm(fake("--step-ms", "2")) as url:
        one, four = bench(url, wl)
        truth = httpx.get(f"{url}/truth").json()["records"]
    assert (len(one.requests), len(four.requests)) == (4, 12)
    assert four.completion_tokens == 12 * 16 and not four.rejected, four.reject_reason
    # the server saw the 16 measured requests (plus warm-ups and the c=4 warm-up wave), all of them whole
    assert sum(r["completion_tokens"] == 16 and r["status"] == "ok" for r in truth) >= 16


def test_a_tokenize_whose_connection_the_server_dropped_is_sent_once_more() -> None:
    """The server closes the first connection under the request (as uvicorn does to one past its keep-alive):
    the calibration call is repeated on another connection instead of aborting the cell."""
    async def main() -> tuple[int, int]:
        connections = 0

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            head = await reader.readuntil(b"\r\n\r\n")
            if connections > 1:
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                await reader.readexactly(length)
                body = b'{"count": 7}'
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with Client(BenchTarget(f"http://127.0.0.1:{port}", MODEL, "t1"), workload(), SamplingSpec()) as c:
            count = await c.count(user("hello"))
        server.close()
        await server.wait_closed()
        return count, connections

    assert asyncio.run(main()) == (7, 2)
