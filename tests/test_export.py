"""The `vllm bench serve --save-result` export, pinned to vLLM 0.26.0's keys and units."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from specwatch.export.vllm_bench import ExportContext, export_cells, vllm_0_26_0
from specwatch.store.rundir import write_raw
from specwatch_testing import records as rf

KEYS = json.loads((Path(__file__).parent / "data" / "vllm-0.26.0-save-result-keys.json").read_text())
CTX = ExportContext("demo", "completions", "specwatch", datetime(2026, 12, 1, 12, 30, 5, tzinfo=UTC), {})


def test_keys_and_their_order_are_vllm_0_26_0s() -> None:
    doc = vllm_0_26_0(rf.cell(4, "code", 1.0, [80.0, 60.0, 40.0]), CTX)
    assert list(doc) == KEYS["keys"]


def test_values_are_in_vllms_units() -> None:
    cell = rf.cell(4, "code", 1.0, [80.0, 60.0, 40.0])
    doc = vllm_0_26_0(cell, CTX)
    assert doc["date"] == "20261201-123005" and doc["backend"] == doc["endpoint_type"] == "openai"
    assert doc["request_rate"] == "inf" and doc["max_concurrency"] == 4
    assert doc["duration"] == cell.wall_s == 1.0  # seconds
    assert doc["completed"] == 4 and doc["failed"] == 0 and doc["total_output_tokens"] == 4 * 33
    assert doc["output_throughput"] == pytest.approx(132.0)
    assert doc["mean_ttft_ms"] == pytest.approx(50.0) and doc["median_e2el_ms"] == pytest.approx(1050.0)
    assert doc["mean_tpot_ms"] == pytest.approx(1000.0 / 32)
    assert doc["p99_ttft_ms"] is None  # 4 requests: specwatch's rule, not the maximum
    assert doc["median_itl_ms"] == pytest.approx(1000.0 / 11, rel=0.005)
    assert doc["spec_decode_acceptance_rate"] == pytest.approx(100 * 180 / 300)  # a percentage, as vLLM's
    assert doc["spec_decode_acceptance_length"] == pytest.approx(2.8)
    # goodput is requests per second meeting the SLO (rf cells: ttft 50 <= 100 ms, tpot 31 <= 40 ms)
    assert doc["request_goodput"] == pytest.approx(4.0)
    # 12 chunks per stream spread over its decode second, all 4 streams at once
    assert doc["max_concurrent_requests"] == 4 and doc["max_output_tokens_per_s"] > 0


def test_metadata_sits_where_vllms_metadata_flag_puts_it() -> None:
    ctx = ExportContext("demo", "chat", "k5", CTX.date, {"specwatch_cell": "closed/c4/code/p128"})
    keys = list(vllm_0_26_0(rf.cell(4, "code", 1.0, [80.0]), ctx))
    assert keys[keys.index("num_prompts") + 1] == "specwatch_cell"
    assert vllm_0_26_0(rf.cell(4, "code", 1.0, [80.0]), ctx)["backend"] == "openai-chat"


def test_export_command_writes_one_line_per_cell(tmp_path: Path) -> None:
    result = rf.run()
    write_raw(result, tmp_path / "run")
    out = tmp_path / "vllm.jsonl"
    res = CliRunner().invoke(app, ["export", str(tmp_path / "run"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == sum(len(a.cells) for a in result.arms) == 8
    assert {d["label"] for d in lines} == {"k3", "k5"} and lines[0]["specwatch_run_id"] == result.run_id
    assert export_cells([]) == ""


def test_an_unknown_format_is_one_line(tmp_path: Path) -> None:
    write_raw(rf.run(), tmp_path / "run")
    res = CliRunner().invoke(app, ["export", str(tmp_path / "run"), "--out", str(tmp_path / "x"),
                                   "--format", "vllm-0.9"])
    assert res.exit_code == 1 and "vllm-0.26.0" in res.output and len(res.output.strip().splitlines()) == 1
