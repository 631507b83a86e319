"""A cell's prompts as `vllm bench serve --dataset-name custom` reads them, so the peer can be run
on the very same requests (ngram acceptance is set by content, measurement rule 6: two tools with merely
similar prompts differ by prompt-to-prompt variance, not by measurement).

One JSONL file per cell, `<cell id>.jsonl`, a line per request in request order:
{"prompt": text, "output_tokens": n}. The text is what specwatch sends to /v1/completions, nonce
and all; run the peer with `--skip-chat-template` (its custom dataset otherwise wraps each prompt
in the model's chat template) and with prefix caching off, since the nonces are replayed.
"""

from __future__ import annotations

import json
from pathlib import Path

from specwatch.bench.prompts import Prompt
from specwatch.records import CellKey


def dataset_path(directory: Path, key: CellKey) -> Path:
    return directory / f"{key.id.replace('/', '_')}.jsonl"


def write_cell_dataset(directory: Path, key: CellKey, prompts: list[Prompt], max_tokens: int) -> Path:
    """Write the cell's prompts (request order) and return the file."""
    directory.mkdir(parents=True, exist_ok=True)
    path = dataset_path(directory, key)
    path.write_text("".join(json.dumps({"prompt": p.text, "output_tokens": p.max_tokens or max_tokens}) + "\n"
                            for p in prompts))
    return path
