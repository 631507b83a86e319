"""An early-exit draft for `draft_model` speculation: the first N layers of a checkpoint, with
its final norm and its (tied) head, written out as a checkpoint of its own.

It shares the tokenizer, needs no download and no training; its acceptance is low but real and
decays by position. The safetensors file is sliced as bytes (an 8-byte header length, a JSON
header, the tensors' bytes), so the pipeline does it without torch.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

from specwatch.engine import modelcache
from specwatch.engine.modelcache import MODEL_MARKER, commit
from specwatch.engine.models.convert import write_marker
from specwatch.engine.models.wheel import ModelSourceError
from specwatch.records import ModelSource

WEIGHTS = "model.safetensors"
_LAYER = re.compile(r"^model\.layers\.(\d+)\.")
_CHUNK = 1 << 20


def draft_dir(parent: Path, layers: int) -> Path:
    """Beside its parent, named after it (whose name carries the parent's content key)."""
    code = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:8]
    return parent.parent / f"{parent.name}-draft-l{layers}-{code}"


def ensure_early_exit_draft(parent: Path, layers: int) -> Path:
    """The draft of `parent`'s first `layers` layers, written once beside it."""
    target = draft_dir(parent, layers)
    if (target / MODEL_MARKER).is_file():
        return target
    config = json.loads((parent / "config.json").read_text(encoding="utf-8"))
    depth = config.get("num_hidden_layers")
    if not isinstance(depth, int):
        raise ModelSourceError(f"draft layers {layers}: {parent / 'config.json'} has no num_hidden_layers; fix: "
                               "draft from a decoder-only checkpoint (model.package)")
    if not 1 <= layers < depth:
        raise ModelSourceError(f"draft layers {layers}: the checkpoint {parent} has {depth} layers; fix: keep "
                               f"between 1 and {depth - 1} of them")
    if not (parent / WEIGHTS).is_file():
        raise ModelSourceError(f"draft layers {layers}: {parent} has no single {WEIGHTS}; fix: draft from a "
                               "converted packaged model (model.package)")
    modelcache.remove_stale_tmp(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        slice_layers(parent / WEIGHTS, tmp / WEIGHTS, layers)
        for f in sorted(parent.iterdir()):
            if f.is_file() and f.name not in (WEIGHTS, "config.json", MODEL_MARKER):
                shutil.copy2(f, tmp / f.name)  # the tokenizer and generation config, unchanged
        config["num_hidden_layers"] = layers
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
                                         encoding="utf-8")
        write_marker(tmp, draft_source(parent, layers), {"parent": parent.name})
        return commit(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def draft_source(parent: Path, layers: int) -> ModelSource:
    """The parent's provenance with the layers kept: the draft is part of the model step."""
    marker = json.loads((parent / MODEL_MARKER).read_text(encoding="utf-8"))
    if "source" not in marker:
        raise ModelSourceError(f"draft layers {layers}: {parent} is not a converted packaged model (no source in "
                               f"{MODEL_MARKER}); fix: use model.package")
    return ModelSource.model_validate({**marker["source"], "draft_layers": layers})


def slice_layers(src: Path, dst: Path, layers: int) -> None:
    """Copy every tensor but those of decoder layers >= `layers`, in the source's order."""
    with open(src, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header: dict[str, Any] = json.loads(f.read(size))
        base = 8 + size
        kept = sorted(((name, info) for name, info in header.items()
                       if name != "__metadata__" and _keep(name, layers)), key=lambda t: t[1]["data_offsets"][0])
        out_header: dict[str, Any] = {"__metadata__": header["__metadata__"]} if "__metadata__" in header else {}
        offset = 0
        for name, info in kept:
            begin, end = info["data_offsets"]
            out_header[name] = {**info, "data_offsets": [offset, offset + end - begin]}
            offset += end - begin
        encoded = json.dumps(out_header, separators=(",", ":")).encode()
        encoded += b" " * (-len(encoded) % 8)  # the format pads the header to keep tensors 8-byte aligned
        with open(dst, "wb") as out:
            out.write(struct.pack("<Q", len(encoded)) + encoded)
            for _, info in kept:
                begin, end = info["data_offsets"]
                f.seek(base + begin)
                left = end - begin
                while left:
                    chunk = f.read(min(_CHUNK, left))
                    if not chunk:
                        raise ModelSourceError(f"{src} ends inside tensor data (truncated); fix: delete its "
                                               "checkpoint dir so that it is converted again")
                    out.write(chunk)
                    left -= len(chunk)


def _keep(name: str, layers: int) -> bool:
    m = _LAYER.match(name)
    return m is None or int(m.group(1)) < layers
