"""Loops judged on what the model meant to write (issue 21): repetition and the loop flag on the output
before its first EOS, the tail after it reported as its share; acceptance per prompt class."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from specwatch.analysis.loops import before_eos
from specwatch.bench.client import BenchTarget
from specwatch.bench.gates import Gates
from specwatch.bench.runner import InProcess, prepare
from specwatch.engine.checkpoint import check_checkpoint
from specwatch.records import CellResult
from specwatch.report.classes import class_rows, class_section
from specwatch.spec import ExperimentSpec, SamplingSpec, WorkloadSpec
from specwatch_testing import records
from specwatch_testing.fake_vllm import TAIL, tokenize
from specwatch_testing.server import run_fake_vllm

MODEL = "demo"
EOS = 31_999  # fake_vllm's default vocabulary is 32000 ids
SPEC = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})
WL = WorkloadSpec(prompt_classes=["code", "prose"], prompt_tokens=40, max_tokens=64, concurrency=[1],
                  requests_per_cell=2, warmup_requests=1, read_timeout_s=30.0)


def bench(*server: str) -> list[CellResult]:
    """The fake server's answer, 12 random words then a repeating tail, measured with EOS id EOS known."""
    args = ["--served-model-name", MODEL, "--spec-config", SPEC, "--step-ms", "3", "--tail-after", "12", *server]
    with run_fake_vllm(args) as url:
        target = BenchTarget(url, MODEL, "loops", eos_token_ids=(EOS,))
        asyncio.run(prepare(target, WL, SamplingSpec()))
        return InProcess().measure(target, WL, SamplingSpec(), Gates(0.01, WL.repetition_flag_ratio))


def test_the_tail_is_a_loop_the_id_eos_is_free() -> None:
    assert EOS not in {tokenize(word, 32_000)[0] for word in TAIL}
    assert before_eos([5, 6, EOS, 5, 6, 7], {EOS}) == [5, 6] and before_eos([5, 6], {EOS}) == [5, 6]


def test_a_tail_after_eos_is_no_loop_and_its_share_is_reported() -> None:
    cells = bench("--eos-token-id", str(EOS))
    for cell in cells:
        assert [r.pre_eos_tokens for r in cell.requests] == [12, 12]
        assert cell.repetition_ratio_median is not None and cell.repetition_ratio_median < 0.5
        assert not any("repetition" in f for f in cell.flags), cell.flags
    spec = ExperimentSpec.model_validate(_doc())
    result = records.run(arms=[records.arm("base", 3, 1.0, [1.0]).model_copy(update={"cells": cells})])
    (code, prose) = class_rows(result, spec)
    assert (code.looped, code.eos_tail_share) == (0, 52 / 64)  # the EOS and the 51 tokens after it
    assert "Classes that still loop before EOS: none." in class_section(result, spec)


def test_without_eos_the_loop_is_still_flagged() -> None:
    cells = bench()
    for cell in cells:
        assert [r.pre_eos_tokens for r in cell.requests] == [64, 64]
        assert any("acceptance may be inflated by repetition" in f for f in cell.flags), cell.flags
    spec = ExperimentSpec.model_validate(_doc())
    result = records.run(arms=[records.arm("base", 3, 1.0, [1.0]).model_copy(update={"cells": cells})])
    lines = class_section(result, spec)
    assert "Classes that still loop before EOS: `base` code (1 of 1), `base` prose (1 of 1)." in lines
    assert all(r.eos_tail_share == 0.0 and r.mean_acceptance_length is None for r in class_rows(result, spec))


def _doc() -> dict:
    return {"name": "loops", "model": {"generate": {}},
            "images": [{"name": "cpu", "version": "0.32.0"}],
            "arms": [{"name": "base", "image": "cpu", "speculative": {"method": "ngram", "k": 3,
                                                                      "prompt_lookup_max": 4}}],
            "baseline": "base", "workload": {"prompt_classes": ["code", "prose"], "concurrency": [1, 4]}}


def test_acceptance_per_class_states_its_direction_and_size() -> None:
    """prose above code in one arm, below in the other: each row says so against the arm's first class."""
    def arm(name: str, k: int, code: list[float], prose: list[float]):  # accepted per position of 100 drafts
        cells = [records.cell(c, "code", 1.0, code) for c in (1, 4)] + \
                [records.cell(c, "prose", 1.0, prose) for c in (1, 4)]
        return records.arm(name, k, 1.0, code).model_copy(update={"cells": cells})

    doc = _doc()
    doc["arms"].append({"name": "k5", "image": "cpu", "speculative": {"method": "ngram", "k": 5,
                                                                      "prompt_lookup_max": 4}})
    spec = ExperimentSpec.model_validate(doc)
    result = records.run(arms=[arm("base", 3, [80.0, 60.0, 40.0], [90.0, 80.0, 70.0]),
                               arm("k5", 5, [80.0, 60.0, 40.0, 20.0, 10.0], [50.0, 30.0, 10.0, 5.0, 5.0])])
    rows = {(r.arm, r.prompt_class): r for r in class_rows(result, spec)}
    assert rows["base", "code"].mean_acceptance_length == 2.8
    assert rows["base", "prose"].per_position == [0.9, 0.8, 0.7]
    lines = class_section(result, spec)
    assert "| base | prose | 2 | 3.40 | +0.60 (+21%) | 0.90 0.80 0.70 | 0 of 2 | 0.10 | - |" in lines
    assert "| k5 | prose | 2 | 2.00 | -1.10 (-35%) | 0.50 0.30 0.10 0.05 0.05 | 0 of 2 | 0.10 | - |" in lines


def test_eos_ids_come_from_config_and_generation_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 2}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    assert check_checkpoint(tmp_path).eos_token_ids == [0, 2]
