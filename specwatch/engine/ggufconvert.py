"""Dequantize a GGUF model into a bf16 safetensors checkpoint with tokenizer.json.

A standalone script run by an image's python, with `gguf` and `accelerate` on a side path
(`--side`) rather than installed into the image, whose digest is the hash of its package list:

    python specwatch/engine/ggufconvert.py --gguf FILE --side DIR --out DIR

It prints one JSON line with the library versions it converted with. A failure prints one line,
`ggufconvert: STEP: what happened`, and exits 3. Only stdlib and the ML libraries are imported.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from pathlib import Path

FAILED = 3


def convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16,
                                                 quantization_config=GgufConfig(dequantize=True))
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The weights are dense now; a quantizer left attached would save them as GGUF blocks
    # and the config would tell vLLM to load a GGUF checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, required=True, help="the .gguf file")
    ap.add_argument("--side", type=Path, required=True, help="a folder holding gguf and accelerate (pip --target)")
    ap.add_argument("--out", type=Path, required=True, help="directory to write the checkpoint into")
    args = ap.parse_args(argv)
    # First on the path: transformers finds gguf by its distribution metadata there.
    sys.path.insert(0, str(args.side))
    step = "import transformers"
    try:
        import transformers  # noqa: F401  (a missing or too old transformers fails here, named as such)

        step = "convert"
        convert(args.gguf, args.out)
    except Exception as exc:  # one line for the pipeline, never a traceback
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"ggufconvert: {step}: {type(exc).__name__}: {message}", file=sys.stderr)
        return FAILED
    versions = {name: importlib.metadata.version(name) for name in ("transformers", "gguf", "accelerate", "torch")}
    print(json.dumps(versions, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
