"""The fake vLLM server keeps vLLM's HTTP shapes and reports the truth it simulated."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specwatch.engine.launchers import free_port
from specwatch_testing.server import child_pids, fake_vllm_argv, fake_vllm_process, run_fake_vllm

MODEL = "fake/m"
K = 3
SPEC = json.dumps({"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 4})
PROMPT = "unique request 1234 : def add(a, b): return a + b"


@pytest.fixture(scope="module")
def spec_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    log = tmp_path_factory.mktemp("fake") / "spec.log"
    args = ["--model", MODEL, "--spec-config", SPEC, "--accept-probs", "0.95,0.9,0.85", "--step-ms", "2"]
    with run_fake_vllm(args + ["--ttft-ms", "5"], log_path=log) as url:
        yield url, log


@pytest.fixture(scope="module")
def plain_server() -> Iterator[str]:
    args = ["--model", MODEL, "--step-ms", "1", "--ttft-ms", "1", "--fail-every", "2", "--stall-after-tokens", "3"]
    with run_fake_vllm(args) as url:
        yield url


def metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{url}/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def value(m: dict, name: str, **labels: str) -> float:
    return m[(name, tuple(sorted({"engine": "0", "model_name": MODEL, **labels}.items())))]


def completion(url: str, max_tokens: int, stream: bool, prompt: str = PROMPT) -> httpx.Response:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "min_tokens": max_tokens,
            "ignore_eos": True, "temperature": 0, "stream": stream}  # fmt: skip
    if stream:
        body["stream_options"] = {"include_usage": True}
    return httpx.post(f"{url}/v1/completions", json=body, timeout=10)


def sse_events(resp: httpx.Response) -> list[dict | str]:
    lines = [ln.removeprefix("data: ") for ln in resp.text.split("\n\n") if ln.startswith("data: ")]
    return [ln if ln == "[DONE]" else json.loads(ln) for ln in lines]


def test_stream_usage_counts_tokens_chunks_undercount(spec_server: tuple[str, Path]) -> None:
    url, log = spec_server
    events = sse_events(completion(url, 64, stream=True))
    assert events[-1] == "[DONE]"
    *chunks, usage_chunk, _ = events
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 64
    assert all(c["object"] == "text_completion" and c["choices"][0]["index"] == 0 for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks][-2:] == [None, "length"]
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert len(text.split()) == 64
    assert len(chunks) < 64 / 2  # ~3.7 tokens per step at this acceptance: chunk counting undercounts
    # Greedy replay: the same prompt gives the same text.
    assert completion(url, 64, stream=False).json()["choices"][0]["text"] == text
    assert "speculative_config=SpeculativeConfig(method='ngram', model=None, num_spec_tokens=3)" in log.read_text()


def test_metrics_deltas_match_truth(spec_server: tuple[str, Path]) -> None:
    url, _ = spec_server
    httpx.post(f"{url}/truth/reset")
    before = metrics(url)
    assert ("vllm:spec_decode_num_drafts_created", (("engine", "0"), ("model_name", MODEL))) in before
    usage = completion(url, 40, stream=False, prompt="unique request 99 fresh prompt").json()["usage"]
    after = metrics(url)
    d = lambda name, **lab: value(after, name, **lab) - value(before, name, **lab)  # noqa: E731
    truth = httpx.get(f"{url}/truth").json()
    (rec,) = truth["records"]
    assert rec["completion_tokens"] == usage["completion_tokens"] == 40 and rec["status"] == "ok"
    assert d("vllm:generation_tokens_total") == 40
    assert d("vllm:prompt_tokens_total") == usage["prompt_tokens"] == rec["prompt_tokens"]
    assert d("vllm:prefix_cache_queries_total") == rec["prompt_tokens"] and d("vllm:prefix_cache_hits_total") == 0
    drafts, accepted = d("vllm:spec_decode_num_drafts_total"), d("vllm:spec_decode_num_accepted_tokens_total")
    assert drafts == rec["steps"] == truth["totals"]["drafts"] > 0
    assert accepted == rec["accepted"] == truth["totals"]["accepted"]
    assert d("vllm:spec_decode_num_draft_tokens_total") == K * drafts
    per_pos = [d("vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(i)) for i in range(K)]
    assert sum(per_pos) == accepted and per_pos == sorted(per_pos, reverse=True)
    # Every step but a capped last one emits accepted+1 tokens; the first token is the prefill's.
    assert drafts + accepted >= 40 - 1
    assert rec["decode_tok_s"] > 0 and rec["t_last_token"] > rec["t_first_token"]
    assert value(after, "vllm:num_requests_running") == 0


def test_tokenize_matches_usage_and_prefix_cache(spec_server: tuple[str, Path]) -> None:
    url, _ = spec_server
    tok = httpx.post(f"{url}/tokenize", json={"model": MODEL, "prompt": PROMPT}).json()
    assert tok["count"] == len(tok["tokens"]) == 16  # words and punctuation marks
    assert completion(url, 2, stream=False).json()["usage"]["prompt_tokens"] == tok["count"]
    # A shared 16-token front is a prefix-cache hit, a different front is not.
    shared = " ".join(f"w{i}" for i in range(16))
    before = metrics(url)
    completion(url, 2, stream=False, prompt=shared + " one")
    completion(url, 2, stream=False, prompt=shared + " two")
    completion(url, 2, stream=False, prompt="nonce " + shared)
    assert value(metrics(url), "vllm:prefix_cache_hits_total") - value(before, "vllm:prefix_cache_hits_total") == 16


def test_plain_server_switches(plain_server: str) -> None:
    url = plain_server
    names = {n for n, _ in metrics(url)}
    assert "vllm:generation_tokens_total" in names and not any("spec_decode" in n for n in names)
    models = httpx.get(f"{url}/v1/models").json()
    assert models["data"][0]["id"] == MODEL and models["data"][0]["max_model_len"] == 4096
    events = sse_events(completion(url, 3, stream=True))  # request 1: fine, one token per chunk
    assert len(events) == 3 + 2 and events[-2]["usage"]["completion_tokens"] == 3
    assert completion(url, 3, stream=False).status_code == 500  # request 2: --fail-every 2
    body = {"model": MODEL, "prompt": "x", "max_tokens": 10, "stream": True}
    with pytest.raises(httpx.ReadTimeout), httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=0.5) as r:
        for _ in r.iter_lines():  # request 3 stalls after 3 tokens
            pass


def test_refuse_k_exits_fast() -> None:
    cmd = fake_vllm_argv(free_port(), ["--spec-config", json.dumps({"method": "ngram", "num_speculative_tokens": 7}),
                                       "--refuse-k", "7,8"])
    t = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 1 and time.monotonic() - t < 5
    assert "ValueError: num_speculative_tokens=7 is not supported" in proc.stderr


def test_boot_delay_health_503_then_200() -> None:
    with run_fake_vllm(["--boot-delay-s", "0.6"], wait_healthy_s=None) as url:
        codes = []
        for _ in range(200):
            with contextlib.suppress(httpx.TransportError):  # not listening yet
                codes.append(httpx.get(f"{url}/health", timeout=0.5).status_code)
            if codes and codes[-1] == 200:
                break
            time.sleep(0.05)
        assert 503 in codes and codes[-1] == 200


def test_two_processes_behind_one_port_answer_for_both() -> None:
    args = ["--model", MODEL, "--spec-config", SPEC, "--step-ms", "1", "--ttft-ms", "1", "--procs", "2"]
    with fake_vllm_process(args) as (url, proc):
        deadline = time.monotonic() + 5
        while len(children := child_pids(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(children) == 2
        httpx.post(f"{url}/truth/reset").raise_for_status()
        # A connection each: SO_REUSEPORT hashes connections, so 2**-23 is the chance one process got them all.
        usages = []
        for i in range(24):
            resp = completion(url, 5 + i % 4, stream=False, prompt=f"unique request {i} two engines")
            usages.append(resp.json()["usage"]["completion_tokens"])
        m = metrics(url)
        per_engine = {e: value(m, "vllm:generation_tokens_total", engine=e) for e in ("0", "1")}
        assert sum(per_engine.values()) == sum(usages) and min(per_engine.values()) > 0
        assert value(m, "vllm:num_requests_running", engine="1") == 0
        drafts = sum(value(m, "vllm:spec_decode_num_drafts_total", engine=e) for e in ("0", "1"))
        for _ in range(4):  # whichever process answers merges both
            truth = httpx.get(f"{url}/truth").json()
            assert len(truth["records"]) == 24 and truth["totals"]["requests"] == 24
            assert truth["totals"]["generation_tokens"] == sum(usages) and truth["totals"]["drafts"] == drafts
            assert sorted(r["completion_tokens"] for r in truth["records"]) == sorted(usages)
        httpx.post(f"{url}/truth/reset").raise_for_status()
        assert httpx.get(f"{url}/truth").json()["totals"]["requests"] == 0
        os.kill(proc.pid, signal.SIGTERM)  # the parent alone: it must stop its children itself
        proc.wait(5)
        assert not [pid for pid in children if os.path.exists(f"/proc/{pid}")]
