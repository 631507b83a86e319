"""Workloads: the chat protocol, prompt sources (shipped classes, multi-turn, a JSONL corpus), per-request
output lengths and the prefix-cache gate, against specwatch_testing.fake_vllm."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
import yaml

from specwatch.bench.client import BenchError, BenchTarget
from specwatch.bench.corpus import Corpus, read_corpus
from specwatch.bench.gates import Gates, gate
from specwatch.bench.prompts import SOURCES, Conversation, MultiTurn, Prompt, PromptRequest, PromptSource, SingleTurn
from specwatch.bench.protocols import protocol_for
from specwatch.bench.runner import InProcess, cell_keys, prepare
from specwatch.records import CellResult, RequestSample, SpecWindow
from specwatch.resolve import load_spec
from specwatch.spec import SamplingSpec, SpecError, WorkloadSpec
from specwatch_testing.fake_vllm import chat_template
from specwatch_testing.fake_vllm import tokenize as fake_tokenize
from specwatch_testing.server import run_fake_vllm
from tests.test_bench import MODEL, fake
from tests.test_spec import base_doc, write


def workload(**kw: object) -> WorkloadSpec:
    base = dict(protocol="chat", prompt_classes=["qa"], prompt_tokens=60, max_tokens=24, concurrency=[1],
                requests_per_cell=4, warmup_requests=1, read_timeout_s=30.0)
    return WorkloadSpec(**{**base, **kw})


def bench(url: str, wl: WorkloadSpec, namespace: str = "w1") -> list[CellResult]:
    target = BenchTarget(url, MODEL, namespace)
    asyncio.run(prepare(target, wl, SamplingSpec()))
    return InProcess().measure(target, wl, SamplingSpec(), Gates(0.01, wl.repetition_flag_ratio))


async def chat_count(messages: Conversation) -> int:
    """What fake_vllm's /tokenize answers for these messages (its template, its tokenizer)."""
    return len(fake_tokenize(chat_template(list(messages)), 32000))


def build(source: PromptSource, index: int, target: int = 60, fronted: bool = True, streams: int = 1) -> Prompt:
    return asyncio.run(source.prompt(PromptRequest(0, index, "ns", target, fronted, streams), chat_count))


# --------------------------------------------------------------------------- chat protocol


def test_chat_body_sends_messages_with_pinned_sampling_and_the_nonce_first() -> None:
    prompt = build(SOURCES["qa"], 3)
    body = protocol_for("chat").body(MODEL, prompt, 24, SamplingSpec())
    assert protocol_for("chat").path == "/v1/chat/completions"
    (message,) = body["messages"]
    assert message["role"] == "user" and message["content"].startswith(f"unique request {prompt.nonce} ")
    assert (body["max_tokens"], body["min_tokens"], body["ignore_eos"]) == (24, 24, True)
    assert body["stream_options"] == {"include_usage": True} and body["return_token_ids"] is True
    # calibrated through the template: the rendered messages, not the bare text, hit the target
    assert 59 <= prompt.tokens <= 60 and prompt.tokens == asyncio.run(chat_count(prompt.messages))
    tok = protocol_for("chat").tokenize_body(MODEL, prompt.messages)
    assert tok == {"model": MODEL, "messages": list(prompt.messages), "add_generation_prompt": True}
    assert protocol_for("completions").tokenize_body(MODEL, prompt.messages)["prompt"] == message["content"]


def test_chat_delta_reads_content_and_token_ids() -> None:
    chat = protocol_for("chat")
    assert chat.delta({"delta": {"role": "assistant", "content": ""}}) == ("", [])
    assert chat.delta({"delta": {"content": " so"}, "token_ids": [7, 9]}) == (" so", [7, 9])


def test_chat_cell_is_calibrated_through_the_servers_template() -> None:
    with run_fake_vllm(fake()) as url:
        (cell,) = bench(url, workload())
        truth = httpx.get(f"{url}/truth").json()["records"][-4:]
    assert not cell.rejected, cell.reject_reason
    assert cell.completion_tokens == 4 * 24 and cell.window.prefix_cache_hit_rate == 0.0
    assert all(59 <= r.prompt_tokens <= 60 for r in cell.requests)
    # what the server prefilled (template included) is what the client calibrated
    assert sorted(t["prompt_tokens"] for t in truth) == sorted(r.prompt_tokens for r in cell.requests)
    assert cell.prefix_cache_gate


def test_chat_to_a_model_without_a_template_is_one_line_before_any_request() -> None:
    with run_fake_vllm(fake("--no-chat-template")) as url:
        with pytest.raises(BenchError) as info:
            bench(url, workload())
        assert httpx.get(f"{url}/truth").json()["records"] == []  # not even warm-up ran
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("workload.protocol 'chat': model 'demo' has no chat template")
    assert "chat_template in tokenizer_config.json" in msg and "protocol: completions" in msg
    assert "(/tokenize: HTTP 400 As of transformers v4.44, default chat template is no longer allowed" in msg
    with run_fake_vllm(fake("--no-chat-template")) as url:  # completions still works on such a model
        (cell,) = bench(url, workload(protocol="completions"))
    assert not cell.rejected, cell.reject_reason


# --------------------------------------------------------------------------- multi-turn


def test_multi_turn_prompts_extend_the_previous_turn_and_share_its_nonce() -> None:
    mt = SOURCES["multiturn"]
    assert isinstance(mt, MultiTurn) and mt.reuses_prefixes
    turns = [build(mt, i, target=160) for i in range(mt.turns)]
    for before, after in zip(turns, turns[1:], strict=False):
        # the earlier turn, continued: whole messages kept, the one it was cut in carried on
        *whole, cut = before.messages
        assert after.messages[: len(whole)] == tuple(whole) and len(after.messages) > len(before.messages)
        assert after.messages[len(whole)]["content"].startswith(cut["content"])
        assert after.text.startswith(before.text) and after.tokens > before.tokens
        assert after.nonce == before.nonce
    assert [m["role"] for m in turns[-1].messages[:4]] == ["user", "assistant", "user", "assistant"]
    assert turns[0].messages[0]["content"].startswith(f"unique request {turns[0].nonce} ")
    assert 155 <= turns[-1].tokens <= 160  # the last turn has the cell's prompt length
    assert build(mt, mt.turns).nonce != turns[0].nonce  # the next conversation is not cached
    assert build(mt, 1, target=160).messages == turns[1].messages  # rebuilt alone, in any order: the same
    # side by side, a wave holds one turn of several conversations; the next wave, their next turns
    wave0, wave1 = [build(mt, i, target=160, streams=2) for i in (0, 1)], [build(mt, i, 160, streams=2) for i in (2, 3)]
    assert wave0[0].messages == turns[0].messages and wave0[1].nonce != wave0[0].nonce
    assert all(w1.text.startswith(w0.text) for w0, w1 in zip(wave0, wave1, strict=True))


def test_multi_turn_cell_reports_its_hit_rate_instead_of_gating_it() -> None:
    with run_fake_vllm(fake()) as url:
        cells = bench(url, workload(prompt_classes=["multiturn", "qa"], prompt_tokens=160, concurrency=[2],
                                    requests_per_cell=8))
    multi, single = cells
    assert multi.prompt_class == "multiturn" and not multi.prefix_cache_gate
    assert multi.window.prefix_cache_hit_rate > 0.2 and not multi.rejected, multi.reject_reason
    assert single.prefix_cache_gate and single.window.prefix_cache_hit_rate == 0.0 and not single.rejected


def test_the_gate_skips_the_hit_rate_only_where_prefixes_are_shared_on_purpose() -> None:
    cell = CellResult(concurrency=1, prompt_class="multiturn", prompt_tokens=10, max_tokens=8, wall_s=1.0,
                      window=SpecWindow(prefix_cache_hits=60.0, prefix_cache_queries=100.0),
                      requests=[RequestSample(index=0, prompt_tokens=10, status="ok", completion_tokens=8)])
    assert gate(cell, Gates()).rejected
    assert not gate(cell.model_copy(update={"prefix_cache_gate": False}), Gates()).rejected


def test_shipped_classes_each_give_varied_calibrated_prompts() -> None:
    for name in ("translation", "summarization", "qa", "math", "rag", "code"):
        source = SOURCES[name]
        assert isinstance(source, SingleTurn)
        prompts = [build(source, i) for i in range(6)]
        assert all(55 <= p.tokens <= 60 for p in prompts)
        bodies = {p.messages[0]["content"].split(" ", 3)[3] for p in prompts}  # behind the nonce
        assert len(bodies) >= 3, name  # seeded windows start on different lines


# --------------------------------------------------------------------------- corpus


def corpus_file(tmp_path: Path, lines: list[object]) -> Path:
    path = tmp_path / "mine.jsonl"
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


@pytest.mark.parametrize(("line", "problem"), [
    ({"text": "hi"}, "has neither prompt nor messages"),
    ({"prompt": "a", "messages": []}, "has both prompt and messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0] is not"),
    ({"prompt": "a", "output_tokens": 0}, "output_tokens 0 is not a whole number >= 1"),
    ("{not json", "not JSON"),
])
def test_a_bad_corpus_line_is_one_line_at_spec_time(tmp_path: Path, line: object, problem: str) -> None:
    path = corpus_file(tmp_path, [{"prompt": "fine"}, "", line])
    doc = base_doc()
    doc["workload"] = {"corpus": path.name}  # relative to the experiment file
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, doc))
    (msg,) = info.value.problems
    assert msg.startswith(f"workload.corpus: {path} line 3: {problem}") and "fix: write each line as" in msg


def test_corpus_path_resolves_against_the_experiment_file(tmp_path: Path) -> None:
    path = corpus_file(tmp_path, [{"prompt": "one"}, {"messages": [{"role": "user", "content": "two"}]}])
    doc = base_doc()
    doc["workload"] = {"corpus": path.name, "protocol": "chat"}
    spec = load_spec(write(tmp_path, doc))
    assert spec.workload.corpus == path and spec.workload.classes == ["corpus:mine"]
    assert [k.id for k in cell_keys(spec.workload)] == ["closed/c1/corpus:mine/p0", "closed/c4/corpus:mine/p0"]
    missing = base_doc()
    missing["workload"] = {"corpus": "nope.jsonl"}
    with pytest.raises(SpecError, match="workload.corpus: .*nope.jsonl' cannot be read"):
        load_spec(write(tmp_path, missing))


def test_corpus_lines_are_nonce_fronted_at_the_first_message(tmp_path: Path) -> None:
    path = corpus_file(tmp_path, [{"messages": [{"role": "system", "content": "be brief"},
                                                {"role": "user", "content": "why?"}], "output_tokens": 5}])
    corpus = Corpus(path)
    first, again = build(corpus, 0), build(corpus, 1)
    assert first.messages[0] == {"role": "system", "content": f"unique request {first.nonce} be brief"}
    assert first.messages[1] == {"role": "user", "content": "why?"} and first.max_tokens == 5
    assert again.nonce != first.nonce  # request 1 wraps to line 0 behind a fresh nonce
    plain = build(corpus, 0, fronted=False)
    assert plain.nonce is None and plain.messages == read_corpus(path)[0].messages


def test_per_request_output_lengths_come_from_the_corpus(tmp_path: Path) -> None:
    path = corpus_file(tmp_path, [{"prompt": "alpha beta", "output_tokens": 8},
                                  {"prompt": "gamma", "output_tokens": 30},
                                  {"messages": [{"role": "user", "content": "delta"}]}])
    with run_fake_vllm(fake()) as url:
        (cell,) = bench(url, workload(corpus=path, requests_per_cell=3, warmup_requests=0, warmup_wave=False))
        truth = httpx.get(f"{url}/truth").json()["records"]
    assert not cell.rejected, cell.reject_reason
    assert [(r.max_tokens, r.completion_tokens) for r in cell.requests] == [(8, 8), (30, 30), (None, 24)]
    assert sorted(t["max_tokens"] for t in truth) == [8, 24, 30]
    assert cell.prompt_class == "corpus:mine" and cell.prompt_tokens == 0 and cell.prefix_cache_gate


def test_nonce_off_replays_the_corpus_and_reports_instead_of_gating(tmp_path: Path) -> None:
    path = corpus_file(tmp_path, [{"prompt": " ".join(f"word{i}" for i in range(80))}])
    with run_fake_vllm(fake()) as url:
        (cell,) = bench(url, workload(protocol="completions", corpus=path, nonce=False, requests_per_cell=4,
                                      warmup_requests=0))
    assert not cell.prefix_cache_gate and cell.window.prefix_cache_hit_rate > 0.5
    assert not cell.rejected, cell.reject_reason


def test_unknown_prompt_class_lists_the_shipped_ones(tmp_path: Path) -> None:
    doc = base_doc()
    doc["workload"] = {"prompt_classes": ["poetry"]}
    (msg,) = pytest.raises(SpecError, load_spec, write(tmp_path, doc)).value.problems
    assert "prompt class 'poetry' is not one of" in msg and "multiturn" in msg and "translation" in msg


def test_example_yaml_still_loads_with_the_new_fields() -> None:
    spec = load_spec(Path(__file__).parent.parent / "examples" / "cpu-ngram.yaml")
    assert spec.workload.nonce and spec.workload.corpus is None
    assert yaml.safe_dump(spec.model_dump(mode="json"))  # round-trips as plain data


# --------------------------------------------------------------------------- specwatch bench


def test_bench_cli_runs_chat_and_a_corpus_and_refuses_in_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli.app import app

    runner = CliRunner()
    args = ["bench", "--model", MODEL, "--concurrency", "1", "--prompt-tokens", "40", "--max-tokens", "16",
            "--requests", "2", "--warmup", "1", "--protocol", "chat"]
    out = tmp_path / "b.json"
    path = corpus_file(tmp_path, [{"prompt": "hello there", "output_tokens": 12}])
    with run_fake_vllm(fake()) as url:
        res = runner.invoke(app, [*args, "--endpoint", url, "--corpus", str(path), "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["workload"]["protocol"] == "chat" and doc["workload"]["corpus"] == str(path)
    (cell,) = doc["cells"]
    assert cell["prompt_class"] == "corpus:mine" and cell["completion_tokens"] == 2 * 12 and cell["prefix_cache_gate"]
    with run_fake_vllm(fake("--no-chat-template")) as url:
        res = runner.invoke(app, [*args, "--endpoint", url, "--prompt-class", "qa"])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert "workload.protocol 'chat': model 'demo' has no chat template" in res.output


# --------------------------------------------------------------------------- stored cells


def test_sanity_checks_leave_the_hit_rate_of_shared_prefix_cells_alone(tmp_path: Path) -> None:
    from specwatch.store.checks import run_checks
    from specwatch.store.db import connect
    from tests.test_quality import RUN, TH, add_grid, cell_id, failures

    con = connect(tmp_path / "h.duckdb")
    con.execute("INSERT INTO runs (run_id, experiment_name, started_at) VALUES ($r, 'w', now())", {"r": RUN})
    add_grid(con, "base", 3, [0.8, 0.65, 0.5], {(4, "code"): {"prefix": 0.4}, (4, "prose"): {"prefix": 0.4}})
    con.execute("UPDATE cells SET prefix_cache_gate = false WHERE cell = $c", {"c": cell_id(4, "prose")})
    bad = failures(run_checks(con, RUN, "base", TH))
    assert [(r.concurrency, r.prompt_class, r.check) for r in bad] == [(4, "code", "sanity.prefix_cache")]
    assert con.execute("SELECT prefix_cache_hit_rate FROM cells WHERE cell = $c",
                       {"c": cell_id(4, "prose")}).fetchone() == (0.4,)  # still stored and reported
    con.close()


def test_the_generated_model_gets_a_chat_template_whose_turns_extend(tmp_path: Path) -> None:
    import jinja2

    from specwatch.engine import modelgen

    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "TokenizersBackend"}))
    (tmp_path / "config.json").write_text(json.dumps({"rope_parameters": {"rope_theta": 10000.0}}))
    modelgen.portable(tmp_path, modelgen.CHAT_TEMPLATE)
    template = json.loads((tmp_path / "tokenizer_config.json").read_text())["chat_template"]
    render = jinja2.Template(template).render
    turn = [{"role": "user", "content": "hi"}]
    first = render(messages=turn, bos_token="<s>", eos_token="</s>", add_generation_prompt=True)
    later = render(messages=[*turn, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "and?"}],
                   bos_token="<s>", eos_token="</s>", add_generation_prompt=True)
    assert first == "<s><|user|>\nhi</s>\n<|assistant|>\n" and later.startswith(first)
