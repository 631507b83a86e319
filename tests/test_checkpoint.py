"""Checkpoint stage: facts, shard completeness, arm constraints, generated-model cache."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import specwatch.engine.checkpoint as ck
from specwatch.spec import GeneratedModel


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


def _facts(tmp_path: Path, **cfg: object) -> ck.CheckpointFacts:
    _write(tmp_path / "config.json", {"architectures": ["X"], "model_type": "x", **cfg})
    return ck.check_checkpoint(tmp_path)


# --------------------------------------------------------------------------- facts


def test_facts_from_config_and_index(tmp_path: Path) -> None:
    cfg = _write(
        tmp_path / "config.json",
        {
            "architectures": ["DeepseekV4ForCausalLM"],
            "model_type": "deepseek_v4",
            "max_position_embeddings": 1048576,
            "dspark_block_size": 5,
            "num_nextn_predict_layers": 1,
        },
    )
    for shard in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        (tmp_path / shard).write_bytes(b"x")
    index = _write(
        tmp_path / ck.INDEX_FILE,
        {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}},
    )

    facts = ck.check_checkpoint(tmp_path)

    assert facts.config_sha256 == hashlib.sha256(cfg.read_bytes()).hexdigest()
    assert facts.index_sha256 == hashlib.sha256(index.read_bytes()).hexdigest()
    assert facts.architectures == ["DeepseekV4ForCausalLM"]
    assert facts.model_type == "deepseek_v4"
    assert facts.max_position_embeddings == 1048576
    assert facts.dspark_block_size == 5
    assert facts.num_nextn_predict_layers == 1
    assert facts.shards == 2


def test_missing_shard_is_named(tmp_path: Path) -> None:
    _write(tmp_path / "config.json", {"model_type": "llama"})
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"x")
    _write(
        tmp_path / ck.INDEX_FILE,
        {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}},
    )
    with pytest.raises(ck.CheckpointError, match="model-00002-of-00002.safetensors") as err:
        ck.check_checkpoint(tmp_path)
    assert "model-00001-of-00002" not in str(err.value)


def test_missing_config_names_path_and_fix(tmp_path: Path) -> None:
    with pytest.raises(ck.CheckpointError) as err:
        ck.check_checkpoint(tmp_path)
    assert str(tmp_path) in str(err.value) and "config.json" in str(err.value)
    assert "model.path" in str(err.value)


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ck.CheckpointError, match="not a directory"):
        ck.check_checkpoint(tmp_path / "nope")


def test_corrupt_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ck.CheckpointError, match="cannot read as JSON"):
        ck.check_checkpoint(tmp_path)


def test_nested_facts(tmp_path: Path) -> None:
    facts = _facts(
        tmp_path,
        dspark_config={"block_size": 4},
        speculative_config={"num_nextn_predict_layers": 2},
        text_config={"max_position_embeddings": 4096},
    )
    assert (facts.dspark_block_size, facts.num_nextn_predict_layers, facts.max_position_embeddings) == (4, 2, 4096)


def test_top_level_wins_and_bools_ignored(tmp_path: Path) -> None:
    facts = _facts(tmp_path, dspark_block_size=5, dspark_config={"block_size": 9}, num_nextn_predict_layers=True)
    assert facts.dspark_block_size == 5
    assert facts.num_nextn_predict_layers is None


# --------------------------------------------------------------------------- constraints


def test_dspark_k_below_block_refused(tmp_path: Path) -> None:
    facts = _facts(tmp_path, dspark_block_size=5)
    reasons = ck.arm_constraint_violations(facts, "dspark", 3)
    assert len(reasons) == 1
    assert "k=3" in reasons[0] and "dspark_block_size=5" in reasons[0] and "k >= 5" in reasons[0]


@pytest.mark.parametrize(("method", "k"), [("dspark", 5), ("dspark", 7), ("ngram", 3), (None, None), ("dspark", None)])
def test_dspark_other_arms_ok(tmp_path: Path, method: str | None, k: int | None) -> None:
    facts = _facts(tmp_path, dspark_block_size=5)
    assert ck.arm_constraint_violations(facts, method, k) == []


def test_no_block_size_no_rule(tmp_path: Path) -> None:
    assert ck.arm_constraint_violations(_facts(tmp_path), "dspark", 1) == []


# --------------------------------------------------------------------------- generated model cache

FAKE_GEN = """
import argparse, json, pathlib, sys
ap = argparse.ArgumentParser()
ap.add_argument("--out"); ap.add_argument("--spec-json"); ap.add_argument("--corpus", nargs="+")
a = ap.parse_args()
spec = json.loads(a.spec_json)
if spec["seed"] == 13:
    print("line one\\nTraceback: boom in layer init", file=sys.stderr)
    sys.exit(3)
out = pathlib.Path(a.out)
(out / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
(out / "model.safetensors").write_bytes(b"w")
(out / "corpus.txt").write_text("\\n".join(a.corpus))
"""


@pytest.fixture
def fake_gen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "fake_modelgen.py"
    script.write_text(FAKE_GEN)
    monkeypatch.setattr(ck, "MODELGEN", script)
    monkeypatch.setenv("SPECWATCH_CACHE", str(tmp_path / "cache"))
    return script


def test_generate_then_reuse(fake_gen: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = GeneratedModel(layers=2)
    out = ck.ensure_generated_model(spec, Path(sys.executable))
    assert (out / ck.MODEL_MARKER).is_file() and (out / "config.json").is_file()
    assert out.name.startswith("llama-l2-h768-")
    assert "code.txt" in (out / "corpus.txt").read_text()  # the shipped prompts are the corpus
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temp dir left behind
    assert ck.check_checkpoint(out).shards == 1

    def no_subprocess(*a: object, **k: object) -> None:
        raise AssertionError("cache hit must not run the generator")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    assert ck.ensure_generated_model(spec, Path(sys.executable)) == out


def test_key_changes_with_spec_and_generator(fake_gen: Path) -> None:
    a = ck.generated_model_key(GeneratedModel())
    assert a == ck.generated_model_key(GeneratedModel())
    assert a != ck.generated_model_key(GeneratedModel(seed=1))
    fake_gen.write_text(FAKE_GEN + "\n# changed\n")
    assert a != ck.generated_model_key(GeneratedModel())


def test_generation_failure_reports_stderr_and_leaves_nothing(fake_gen: Path) -> None:
    spec = GeneratedModel(seed=13)
    with pytest.raises(ck.CheckpointError, match="boom in layer init") as err:
        ck.ensure_generated_model(spec, Path(sys.executable))
    assert "exit 3" in str(err.value)
    assert list(ck.generated_model_dir(spec).parent.iterdir()) == []


def test_missing_python(fake_gen: Path, tmp_path: Path) -> None:
    with pytest.raises(ck.CheckpointError, match="build the image first"):
        ck.ensure_generated_model(GeneratedModel(), tmp_path / "no-python")


# --------------------------------------------------------------------------- real model (slow)


def _file_hashes(d: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir()) if not p.name.startswith(".")
    }


@pytest.mark.real
def test_real_generated_model(vllm_image, demo_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Generate with the image's python into a second cache: byte-identical to the session's (the same
    generator code: it is in the cache key), loadable, vLLM-shaped."""
    spec = GeneratedModel()
    monkeypatch.setenv("SPECWATCH_CACHE", str(tmp_path / "c2"))
    first = demo_model
    second = ck.ensure_generated_model(spec, vllm_image.python)
    assert second != first and _file_hashes(first) == _file_hashes(second)

    facts = ck.check_checkpoint(first)
    assert facts.architectures == ["LlamaForCausalLM"] and facts.model_type == "llama"
    assert facts.max_position_embeddings == spec.max_position_embeddings and facts.shards == 1

    probe = (
        "import json, sys; from transformers import AutoTokenizer; d = sys.argv[1];"
        "t = AutoTokenizer.from_pretrained(d); c = json.load(open(d + '/config.json'));"
        "print(json.dumps({'len': len(t), 'vocab': c['vocab_size'], 'ids': t('def f(x): return x').input_ids,"
        " 'bos': t.bos_token_id, 'eos': t.eos_token_id}))"
    )
    out = subprocess.run([str(vllm_image.python), "-c", probe, str(first)], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["len"] == got["vocab"] == spec.vocab_size
    assert got["ids"][0] == got["bos"] == 0 and got["eos"] == 1
