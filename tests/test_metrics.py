import pytest

from specwatch.bench.metrics import parse_metrics, running_requests, window
from specwatch.records import CellResult, RequestSample, SpecWindow


def exposition(drafts: float, draft_tokens: float, accepted: float, per_pos: list[float], gen: float,
               hits: float = 0.0, queries: float = 1000.0, created: float = 1.7e9) -> str:
    lines = [
        "# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts counter",
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="demo"}} {drafts}',
        f'vllm:spec_decode_num_drafts_created{{engine="0",model_name="demo"}} {created}',
        "# TYPE vllm:spec_decode_num_draft_tokens counter",
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="demo"}} {draft_tokens}',
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="demo"}} {accepted}',
        f'vllm:spec_decode_num_accepted_tokens_created{{engine="0",model_name="demo"}} {created}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
    ]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="demo",position="{i}"}} {v}'
        for i, v in enumerate(per_pos)
    ]
    lines += [
        "# TYPE vllm:generation_tokens counter",
        f'vllm:generation_tokens_total{{engine="0",model_name="demo"}} {gen}',
        "# TYPE vllm:prefix_cache_hits counter",
        f'vllm:prefix_cache_hits_total{{engine="0",model_name="demo"}} {hits}',
        "# TYPE vllm:prefix_cache_queries counter",
        f'vllm:prefix_cache_queries_total{{engine="0",model_name="demo"}} {queries}',
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0",model_name="demo"} 3.0',
    ]
    return "\n".join(lines) + "\n"


def test_parse_reads_counters_positions_and_gauge_but_not_created() -> None:
    text = exposition(10, 50, 30, [9, 8, 6, 4, 3], 400)
    snap = parse_metrics(text)
    assert snap.totals["num_drafts"] == 10
    assert snap.totals["num_accepted_tokens"] == 30
    assert snap.per_position == {0: 9, 1: 8, 2: 6, 3: 4, 4: 3}
    assert snap.positions == 5
    assert running_requests(text) == 3.0
    # `_created` holds a Unix timestamp; reading it as a counter would give ~1.7e9.
    assert max(snap.totals.values()) < 1e6


def test_window_is_a_delta_not_lifetime_totals() -> None:
    before = parse_metrics(exposition(1000, 5000, 3000, [900, 800, 600, 400, 300], 9000, hits=500, queries=900))
    after = parse_metrics(exposition(1100, 5500, 3200, [980, 850, 640, 420, 310], 9600, hits=500, queries=1900))
    w = window(before, after)
    assert w.num_drafts == 100 and w.num_draft_tokens == 500 and w.num_accepted_tokens == 200
    assert w.mean_acceptance_length == pytest.approx(3.0)  # 1 + 200/100, bonus token included
    assert w.draft_acceptance_rate == pytest.approx(0.4)  # 200/500, a rate, not a length
    assert w.acceptance_per_position == pytest.approx([0.8, 0.5, 0.4, 0.2, 0.1])
    assert w.prefix_cache_hit_rate == 0.0  # lifetime would say 500/1900
    assert w.generation_tokens == 600


def test_missing_counters_are_none_not_zero() -> None:
    text = "# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total{engine=\"0\"} 10\n"
    w = window(parse_metrics(text), parse_metrics(text.replace(" 10", " 74")))
    assert w.generation_tokens == 64
    assert w.num_drafts is None
    assert w.mean_acceptance_length is None and w.draft_acceptance_rate is None
    assert w.acceptance_per_position is None and w.prefix_cache_hit_rate is None


def test_engines_are_summed() -> None:
    text = exposition(10, 50, 30, [9], 100) + exposition(10, 50, 30, [9], 100).replace('engine="0"', 'engine="1"')
    snap = parse_metrics("\n".join(dict.fromkeys(text.splitlines())) + "\n")
    assert snap.totals["num_drafts"] == 20 and snap.per_position == {0: 18}


def test_decode_rate_uses_usage_tokens_over_first_to_last_token() -> None:
    # 64 tokens arrived in 16 chunks: a chunk counter would see 16.
    r = RequestSample(index=0, prompt_tokens=128, status="ok", completion_tokens=64, chunks=16,
                      ttft_s=0.2, decode_s=2.1, e2e_s=2.3)
    assert r.decode_tok_s == pytest.approx(63 / 2.1)


def test_cell_aggregates_ignore_failed_requests() -> None:
    ok = [RequestSample(index=i, prompt_tokens=128, status="ok", completion_tokens=33, decode_s=d, ttft_s=t,
                        e2e_s=1.0) for i, (d, t) in enumerate([(1.0, 0.1), (2.0, 0.3), (4.0, 0.2)])]
    bad = RequestSample(index=3, prompt_tokens=128, status="error", error="HTTP 500")
    cell = CellResult(concurrency=2, prompt_class="code", prompt_tokens=128, max_tokens=33, wall_s=4.0,
                      window=SpecWindow(generation_tokens=99.0), requests=[*ok, bad])
    assert cell.requests_ok == 3 and cell.requests_failed == 1
    assert cell.completion_tokens == 99
    assert cell.decode_tok_s_median == pytest.approx(16.0)  # 32 / 2.0
    assert cell.ttft_s_median == pytest.approx(0.2)
    assert cell.aggregate_tok_s == pytest.approx(99 / 4.0)
    assert cell.server_aggregate_tok_s == pytest.approx(99 / 4.0)
    assert cell.decode_tok_s_p10 == pytest.approx(8.0 + 0.2 * 8.0)  # linear interpolation over [8, 16, 32]


def test_the_fast_gauge_reader_agrees_with_the_full_parse() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    text = exposition(10, 50, 30, [9], 100)
    parsed = sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                 if s.name == "vllm:num_requests_running")
    assert running_requests(text) == parsed == 3.0
    two = text + text.replace('engine="0"', 'engine="1"').replace("} 3.0", "} 2.0")
    assert running_requests(two) == 5.0
    assert running_requests("# nothing here\n") is None
