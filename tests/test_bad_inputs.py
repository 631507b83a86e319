"""Bad experiment files: fuzzed (schema-aware and raw bytes), binary, huge, and values past the caps.

The fuzz cases run through `specwatch validate` (CliRunner) against specwatch_testing.specfuzz's
oracle: exit 0 or 1, never a traceback, one bounded line per problem. The profile keeps CI to a
few hundred cases; benchmarks/fuzz_specs.py runs 10k.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from typer.testing import CliRunner

from cli.app import app
from specwatch.resolve import load_spec
from specwatch.spec import MAX_SPEC_BYTES, SpecError
from specwatch_testing import specfuzz
from specwatch_testing.server import REPO

settings.load_profile("specwatch-ci")
WORK = Path(tempfile.mkdtemp(prefix="specwatch-fuzz-"))
runner = CliRunner()


def _holds(data: bytes) -> None:
    verdict = specfuzz.check(data, WORK)
    assert verdict.failure is None, verdict.failure


@given(specfuzz.structured)
def test_fuzzed_experiments_fail_one_line_per_problem(data: bytes) -> None:
    _holds(data)


@given(specfuzz.raw_bytes)
def test_fuzzed_bytes_fail_one_line_per_problem(data: bytes) -> None:
    _holds(data)


def test_the_oracle_catches_a_traceback_and_a_multiline_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    # the fuzz tests prove nothing if check() cannot fail
    import specwatch.resolve

    def crash(path: Path) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(specwatch.resolve, "load_spec", crash)
    monkeypatch.setattr("cli.app.load_spec", crash)
    assert "KeyError" in (specfuzz.check(b"name: x", WORK).failure or "")

    def two_lines(path: Path) -> None:
        raise SpecError(str(path), ["first\nsecond"])

    monkeypatch.setattr("cli.app.load_spec", two_lines)
    assert "one bounded line per problem" in (specfuzz.check(b"name: x", WORK).failure or "")


def test_validate_on_a_binary_file_is_one_line_from_the_real_cli(tmp_path: Path) -> None:
    binary = tmp_path / "model.safetensors"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xcd\xff" * 50)
    res = subprocess.run([str(Path(sys.executable).parent / "specwatch"), "validate", str(binary)],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    assert res.stderr.splitlines()[1:] == ["  is not UTF-8 text (byte 0x89 at offset 0); is it a binary file? fix: "
                                           "pass the experiment YAML file"]


@pytest.mark.parametrize("content,problem", [
    (None, "is a directory; pass the path of an experiment YAML file"),
    (b"x: " + b"a" * MAX_SPEC_BYTES, f"over specwatch's cap of {MAX_SPEC_BYTES:,} for an experiment file"),
    (b"a: &a [*a]\n", "a YAML alias refers to a node that contains it"),
    (b"a: &a [x, x, x, x, x, x, x, x, x, x]\n" + b"".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n".encode() for p, c in zip("abcdef", "bcdefg", strict=True)),
     "expands to over 100,000 values (YAML anchors and aliases)"),
    (b"a: " + b"[" * 5000, "exceeded maximum nesting depth"),
])
def test_files_that_would_exhaust_the_parser_are_one_line(tmp_path: Path, content: bytes | None,
                                                          problem: str) -> None:
    path = tmp_path / "e.yaml"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert len(err.value.problems) == 1 and problem in err.value.problems[0]


EXAMPLE = yaml.safe_load((REPO / "examples" / "cpu-ngram-generated.yaml").read_text())


def _problems(tmp_path: Path, **sections: dict) -> list[str]:
    doc = json.loads(json.dumps(EXAMPLE))
    for section, values in sections.items():
        node = doc
        *parents, last = section.split(".")
        for p in parents:
            node = node[p]
        node[last] = {**node.get(last, {}), **values} if isinstance(values, dict) else values
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(doc))
    try:
        load_spec(path)
    except SpecError as exc:
        return exc.problems
    return []


@pytest.mark.parametrize("section,values,problem", [
    ("model.generate", {"layers": 99999999999999999999},
     "model.generate.layers: 99999999999999999999 is over specwatch's cap of 512 (the deepest published models "
     "have ~130 layers); fix: use at most 512"),
    ("model.generate", {"hidden_size": 10**6}, "model.generate.hidden_size: 1000000 is over specwatch's cap of 65,536"),
    ("model.generate", {"heads": 4096}, "model.generate.heads: 4096 is over specwatch's cap of 1,024"),
    ("model.generate", {"vocab_size": 10**9}, "model.generate.vocab_size: 1000000000 is over specwatch's cap"),
    ("model.generate", {"max_position_embeddings": 10**9}, "over specwatch's cap of 16,777,216"),
    ("model.generate", {"layers": 500, "hidden_size": 16384, "heads": 128},
     "model.generate: 587B parameters (layers 500, hidden_size 16384, intermediate_size 2048, vocab_size 2048) "
     "is over specwatch's cap of 80B"),
    ("model.generate", {"hidden_size": 770}, "hidden_size 770 is not a multiple of heads 12"),
    ("model.generate", {"seed": 2**64}, "does not fit a 64-bit seed"),
    ("workload", {"requests_per_cell": 10**7}, "workload.requests_per_cell: 10000000 is over specwatch's cap of "
                                               "1,000,000 (each request's sample is kept in memory"),
    ("workload", {"concurrency": [1, 10**6], "requests_per_cell": 10**6},
     "workload.concurrency[1]: 1000000 is over specwatch's cap of 65,536 (one TCP connection per request"),
    ("workload", {"max_tokens": 10**9}, "workload.max_tokens: 1000000000 is over specwatch's cap of 16,777,216"),
    ("workload", {"duration_s": float("inf")}, "workload.duration_s: Input should be a finite number"),
    ("design", {"rounds": 10**6}, "design.rounds: 1000000 is over specwatch's cap of 1,000"),
])
def test_sizes_past_a_cap_name_the_cap(tmp_path: Path, section: str, values: dict, problem: str) -> None:
    problems = _problems(tmp_path, **{section: values})
    assert any(problem in p for p in problems), problems


def test_the_caps_admit_real_gpu_work(tmp_path: Path) -> None:
    # a generated 24-layer, 2048-hidden model at concurrency 1024, and a 70B-class shape
    assert _problems(tmp_path, **{"model.generate": {"layers": 24, "hidden_size": 2048, "intermediate_size": 8192,
                                                     "heads": 16, "vocab_size": 128_256,
                                                     "max_position_embeddings": 131_072},
                                  "workload": {"concurrency": [1, 1024], "requests_per_cell": 4096,
                                               "prompt_tokens": 8192, "max_tokens": 8192}}) == []
    assert _problems(tmp_path, **{"model.generate": {"layers": 80, "hidden_size": 8192, "intermediate_size": 28672,
                                                     "heads": 64, "vocab_size": 128_256}}) == []


def test_a_cap_reaches_specwatch_bench_options_too() -> None:
    res = runner.invoke(app, ["bench", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--concurrency", "100000",
                              "--requests", "100000"])
    assert res.exit_code == 1 and "--concurrency: 100000 is over specwatch's cap of 65,536" in res.output


@pytest.mark.parametrize("values,problem", [
    ({"batched_waves": "many"}, "workload.batched_waves: Input should be a valid integer"),
    ({"batched_waves": 0}, "workload.batched_waves: Input should be greater than 0"),
    ({"concurrency": [1, 65536], "requests_per_cell": 65536},
     "workload.batched_waves: 16 waves at concurrency 65536 is 1,048,576 requests, over specwatch's cap of 1,000,000 "
     "per cell; fix: use at most 15 waves"),
    ({"duration_s": 30}, "workload.duration_s: 30 s with 2 arms compared"),
])
def test_cell_sizing_problems_are_one_line_from_validate(tmp_path: Path, values: dict, problem: str) -> None:
    problems = _problems(tmp_path, workload=values)
    assert len(problems) == 1 and problem in problems[0] and "fix" in problems[0], problems
    path = tmp_path / "e.yaml"  # the file _problems wrote, through the CLI: one line, no traceback
    res = runner.invoke(app, ["validate", str(path)])
    assert res.exit_code == 1 and "Traceback" not in res.output and problem in res.output


@pytest.mark.parametrize("old,value,line", [
    ("blocks", 3, "design.blocks: renamed to design.rounds; fix: write `rounds: 3`"),
    ("max_blocks", 6, "design.max_blocks: renamed to design.max_rounds; fix: write `max_rounds: 6`"),
])
def test_a_key_issue_22_renamed_is_one_line_naming_the_new_key(tmp_path: Path, old: str, value: int,
                                                                line: str) -> None:
    assert _problems(tmp_path, design={old: value}) == [line]
    res = runner.invoke(app, ["validate", str(tmp_path / "e.yaml")])
    assert res.exit_code == 1 and "Traceback" not in res.output and line in res.output
