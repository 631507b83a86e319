"""The CLI contract: exit codes, one-line errors, JSON output."""

from __future__ import annotations

import json
import re
from functools import partial
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cli.app import app
from specwatch.store.rundir import write_raw
from specwatch_testing import records as rf
from specwatch_testing.experiments import LOOSE_CLIENT_GATES
from specwatch_testing.server import run_fake_vllm

EXAMPLE = Path(__file__).parent.parent / "examples" / "cpu-ngram-generated.yaml"
runner = CliRunner()
SPEC = json.dumps({"method": "ngram", "num_speculative_tokens": 3})


def test_validate_prints_the_plan() -> None:
    res = runner.invoke(app, ["validate", str(EXAMPLE)])
    assert res.exit_code == 0, res.output
    assert "2 arm(s), 2 server launch(es)" in res.output


def test_validate_plan_states_the_rounds_a_call_needs_and_their_minutes(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECWATCH_CACHE", str(tmp_path / "cache"))  # nothing built: no stored variance applies
    res = runner.invoke(app, ["validate", "--plan", str(EXAMPLE)])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "stored variance: none looked up (image 'cpu-0.32' is not built on this host yet;" in text, text
    assert re.search(r"power: a \+-10% change at every level is called in its direction with 80% power after \d+ "
                     r"round\(s\), about \d+ min \(paired sd 0\.030 per round, default: the 2-core CPU host's "
                     r"measured 0\.030 \(benchmarks/README\.md section 9\)\); this design stops at 1 round\(s\)", text)


def test_rounds_plan_uses_a_stored_variance_where_there_is_one() -> None:
    from specwatch.analysis.sequential import COMPOSITE, PriorVariance
    from specwatch.plan import plan, rounds_plan
    from specwatch.resolve import load_spec

    spec = load_spec(EXAMPLE)
    p = plan(spec)
    (default,) = rounds_plan(spec, p)
    (stored,) = rounds_plan(spec, p, {(COMPOSITE, "decode_tok_s"): PriorVariance(0.02, 20, "A/A 2026-12-02")})
    assert stored.source == "stored: A/A 2026-12-02 (df 20)" and stored.level == "all"
    # a quieter stored variance with its df needs fewer rounds than the default (0.030, no df)
    assert stored.rounds is not None and default.rounds is not None and stored.rounds < default.rounds
    assert stored.minutes == pytest.approx(stored.rounds * p.seconds / p.rounds / 60)


def test_validate_bad_file_one_line_per_problem_and_no_traceback(tmp_path: Path) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["arms"][0]["speculative"]["k"] = -1
    doc["arms"][1]["speculative"]["method"] = "ngarm"
    doc["workload"]["max_tokens"] = "lots"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    res = runner.invoke(app, ["validate", str(bad)])
    assert res.exit_code == 1
    lines = [line for line in res.output.splitlines() if line.startswith("  ")]
    assert len(lines) == 3
    assert "Traceback" not in res.output


def test_run_refuses_a_bad_file_before_starting_anything(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodel: {path: /nope}\nimages: []\narms: []\nbaseline: a\n")
    res = runner.invoke(app, ["run", str(bad), "--db", str(tmp_path / "h.duckdb")])
    assert res.exit_code == 1
    assert not (tmp_path / "h.duckdb").exists()


def fake_args(*extra: str) -> list[str]:
    return ["--served-model-name", "demo", "--spec-config", SPEC, "--accept-probs", "0.9,0.7,0.5", "--step-ms", "4",
            *extra]


def bench_args(url: str, *extra: str) -> list[str]:
    return ["bench", "--endpoint", url, "--model", "demo", "--concurrency", "1,2", "--prompt-class", "code",
            "--prompt-tokens", "32", "--max-tokens", "24", "--requests", "4", "--warmup", "1", *extra]


@pytest.fixture
def loose_client_gates(monkeypatch: pytest.MonkeyPatch) -> None:
    """`bench` with the client gates of a loaded host's tests: what these tests read is the output, not the
    gates (CI stop 32: a c=2 cell rejected for a 53 ms loop lag p99 on a loaded 2-core host)."""
    from specwatch.bench.gates import Gates

    monkeypatch.setattr("specwatch.bench.gates.Gates", partial(Gates, **LOOSE_CLIENT_GATES))


@pytest.mark.usefixtures("loose_client_gates")
def test_bench_writes_the_documented_json(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    with run_fake_vllm(fake_args()) as url:
        res = runner.invoke(app, bench_args(url, "--json", str(out), "--temperature", "0"))
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["model"] == "demo" and doc["sampling"]["temperature"] == 0.0
    assert doc["workload"]["read_timeout_s"] == 300.0
    assert [c["concurrency"] for c in doc["cells"]] == [1, 2]
    cell = doc["cells"][0]
    for field in ("requests_ok", "requests_failed", "completion_tokens", "decode_tok_s_median", "decode_tok_s_p10",
                  "decode_tok_s_p90", "ttft_s_median", "ttft_s_p90", "tpot_ms_median", "e2e_s_median",
                  "aggregate_tok_s", "server_aggregate_tok_s", "mean_acceptance_length", "draft_acceptance_rate",
                  "acceptance_per_position", "num_drafts", "num_draft_tokens", "num_accepted_tokens",
                  "prefix_cache_hit_rate", "max_running_observed", "rejected", "reject_reason"):
        assert field in cell, field
    assert cell["completion_tokens"] == 4 * 24 and cell["prompt_tokens"] == 32
    assert len(cell["acceptance_per_position"]) == 3


@pytest.mark.usefixtures("loose_client_gates")
def test_bench_rate_cells_in_the_json(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    with run_fake_vllm(fake_args()) as url:
        res = runner.invoke(app, bench_args(url, "--concurrency", "", "--rate", "20", "--arrival", "gamma",
                                            "--burstiness", "2", "--json", str(out)))
    assert res.exit_code == 0, res.output
    (cell,) = json.loads(out.read_text())["cells"]
    assert (cell["cell"], cell["load_mode"], cell["concurrency"]) == ("rate/r20/code/p32", "rate", None)
    assert (cell["request_rate"], cell["arrival"], cell["burstiness"]) == (20.0, "gamma", 2.0)
    assert cell["achieved_rate"] > 10 and cell["client_send_lateness_ms_p99"] >= 0
    assert "r=20/s" in res.output


@pytest.mark.usefixtures("loose_client_gates")
def test_bench_saves_vllm_results_with_goodput(tmp_path: Path) -> None:
    out = tmp_path / "vllm.jsonl"
    with run_fake_vllm(fake_args()) as url:
        res = runner.invoke(app, bench_args(url, "--slo", "ttft_ms=10000,tpot_ms=10000", "--save-result", str(out),
                                            "--json", str(tmp_path / "b.json")))
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [d["max_concurrency"] for d in lines] == [1, 2] and lines[0]["model_id"] == "demo"
    assert lines[0]["request_goodput"] == pytest.approx(lines[0]["request_throughput"])  # loose SLOs: all good
    cell = json.loads((tmp_path / "b.json").read_text())["cells"][0]
    assert cell["goodput_share"] == 1.0 and cell["slo_ttft_ms"] == 10000.0 and cell["ttft_ms_p50"] > 0


def test_bench_exits_4_when_a_cell_is_rejected() -> None:
    with run_fake_vllm(fake_args("--fail-every", "5")) as url:
        res = runner.invoke(app, bench_args(url))
    assert res.exit_code == 4, res.output
    assert "rejected" in res.output


def test_bench_keeps_the_cells_measured_before_the_server_died() -> None:
    # warm-up + the c=1 cell's 4 requests, then a SIGKILL on the c=2 cell's second request
    with run_fake_vllm(fake_args("--crash-after", "6")) as url:
        res = runner.invoke(app, bench_args(url))
    assert res.exit_code == 4, res.output
    # the table holds the cell finished before the kill (its 4 requests kept, whatever the client gates said of
    # a loaded host), and the one it hit, rejected with its failures (connection errors, or timeouts under load)
    status = [line.rstrip(" │").rsplit("│", 1)[-1].strip() for line in res.output.splitlines()
              if line.startswith("│")]
    assert len(status) == 2 and "requests failed" not in status[0], res.output
    assert status[1].startswith("rejected: 4 of 4 requests failed ("), res.output
    assert "error: stopped at cell c=2 code: the server stopped answering" in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("args,message", [
    (["--concurrency", "one"], "--concurrency 'one'"),
    (["--prompt-class", "poetry"], "--prompt-class"),
    (["--duration", "soon"], "--duration 'soon'"),
    (["--rate", "2,0"], "--rate: rate 0.0 is not a positive number"),
    (["--rate", "fast"], "--rate 'fast'"),
    (["--rate", "2", "--burstiness", "0.5"], "needs arrival: gamma"),
    (["--slo", "itl_ms=20"], "--slo: unknown SLO 'itl_ms'; the known SLOs are ttft_ms, tpot_ms, e2e_ms"),
    (["--slo", "ttft_ms"], "--slo 'ttft_ms': write NAME=MS pairs"),
    (["--kv-poll", "0.2s"], "--kv-poll"),
])
def test_bench_bad_options_are_one_line(args: list[str], message: str) -> None:
    res = runner.invoke(app, bench_args("http://127.0.0.1:9", *args))
    assert res.exit_code == 1 and message in res.output and "Traceback" not in res.output


def test_bench_against_a_down_server_is_one_line() -> None:
    res = runner.invoke(app, bench_args("http://127.0.0.1:9"))
    assert res.exit_code == 1
    assert "not answering /v1/models" in res.output and "Traceback" not in res.output


def test_ingest_then_sql(tmp_path: Path) -> None:
    write_raw(rf.run(), tmp_path / "run")
    db = tmp_path / "h.duckdb"
    res = runner.invoke(app, ["ingest", str(tmp_path / "run"), "--db", str(db)])
    assert res.exit_code == 0 and "8 cells" in res.output
    res = runner.invoke(app, ["sql", "select arm, count(*) as n from cell_results group by arm order by arm",
                              "--db", str(db), "--format", "csv"])
    assert res.exit_code == 0 and res.output.splitlines()[:3] == ["arm,n", "k3,4", "k5,4"]
    res = runner.invoke(app, ["sql", "select nope from cell_results", "--db", str(db)])
    assert res.exit_code == 1 and "query failed" in res.output


def test_named_queries_from_the_cli(tmp_path: Path) -> None:
    write_raw(rf.run(), tmp_path / "run")
    db = tmp_path / "h.duckdb"
    assert runner.invoke(app, ["ingest", str(tmp_path / "run"), "--db", str(db)]).exit_code == 0
    listing = runner.invoke(app, ["sql", "--list", "--db", str(db)])
    assert listing.exit_code == 0 and "image-vs-image" in listing.output and "k-vs-k" in listing.output
    res = runner.invoke(app, ["sql", "--name", "k-vs-k", "--param", "k_a=3", "--param", "k_b=5", "--db", str(db),
                              "--format", "json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert {(r["concurrency"], r["prompt_class"]) for r in rows} == {(1, "code"), (1, "prose"), (4, "code"),
                                                                     (4, "prose")}
    missing = runner.invoke(app, ["sql", "--name", "k-vs-k", "--param", "k_a=3", "--db", str(db)])
    assert missing.exit_code == 1 and "k_b" in missing.output and "Traceback" not in missing.output
