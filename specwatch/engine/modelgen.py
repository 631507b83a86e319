"""Generate the demo checkpoint: a byte-level BPE tokenizer and a random-weight Llama.

A standalone script run by an image venv's python (it needs torch/transformers/tokenizers,
which the pipeline's own venv must never import):

    python specwatch/modelgen.py --out DIR --spec-json '{"layers": 4, ...}' --corpus a.txt b.txt

Same spec + same corpus + same library versions -> byte-identical files in DIR, so the
checkpoint's config/index sha256 recorded as provenance means something. Only stdlib and
the three ML libraries are imported here; nothing from `specwatch`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

# Single-threaded training: the BPE trainer's merge order must not depend on thread timing.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Mirrors specwatch.spec.GeneratedModel's defaults; the pipeline always passes every field.
DEFAULTS: dict[str, Any] = {
    "layers": 4,
    "hidden_size": 256,
    "intermediate_size": 512,
    "heads": 4,
    "vocab_size": 2048,
    "max_position_embeddings": 1024,
    "seed": 0,
}
BOS, EOS = "<s>", "</s>"
# A plain role-header template (zephyr-like), so `/v1/chat/completions` works on the demo model.
# The generation prompt equals an assistant message's header: a later turn that contains this
# turn's reply shares this turn's rendered prompt as its prefix.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}"
    "{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def train_tokenizer(corpus: list[Path], vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        # The corpus is small (~20 KB); merges seen once are allowed so the vocab reaches the size asked for.
        min_frequency=1,
        special_tokens=[BOS, EOS],  # ids 0 and 1
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodable: no <unk> ever
        show_progress=False,
    )
    # Sorted, decoded text in a fixed order: the trainer sees the same sequence every time.
    texts = [p.read_text(encoding="utf-8") for p in sorted(corpus, key=lambda p: p.name)]
    tok.train_from_iterator(texts, trainer=trainer)
    # Llama convention: BOS in front of every encoded prompt, so vLLM's /tokenize counts match serving.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A",
        pair=f"{BOS} $A {BOS} $B",
        special_tokens=[(BOS, tok.token_to_id(BOS))],
    )
    return tok


def build(out: Path, spec: dict[str, Any], corpus: list[Path]) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    raw_tok = train_tokenizer(corpus, int(spec["vocab_size"]))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw_tok,
        bos_token=BOS,
        eos_token=EOS,
        model_max_length=int(spec["max_position_embeddings"]),
        clean_up_tokenization_spaces=False,
    )
    vocab = len(tokenizer)  # a small corpus may yield fewer merges than asked for

    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=int(spec["hidden_size"]),
        intermediate_size=int(spec["intermediate_size"]),
        num_hidden_layers=int(spec["layers"]),
        num_attention_heads=int(spec["heads"]),
        num_key_value_heads=int(spec["heads"]),
        max_position_embeddings=int(spec["max_position_embeddings"]),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=None,
        tie_word_embeddings=False,
        initializer_range=0.02,
    )
    # bf16 on disk: vLLM on CPU downcasts float32 to bf16 anyway (and warns per tensor), and it halves the file.
    config.dtype = "bfloat16"
    torch.manual_seed(int(spec["seed"]))
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    # Explicit generation config: otherwise one is derived from the model config and may
    # pick up version-dependent defaults.
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, do_sample=False
    )

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    portable(out, CHAT_TEMPLATE)
    canonicalise_json(out)


def portable(out: Path, chat_template: str) -> None:
    """One checkpoint serves every image of an A/B, and older images ship transformers 4.x.

    transformers 5 writes `tokenizer_class: TokenizersBackend` and `rope_parameters`, which 4.x
    does not know; `PreTrainedTokenizerFast` and a top-level `rope_theta` load in both. The chat
    template goes into tokenizer_config.json, which every version reads; a chat_template.jinja
    (which only newer ones read) is removed, so the checkpoint has one template.
    Also used by the packaged-model converter (specwatch.engine.models), on its saved checkpoint.
    """
    tok_cfg = out / "tokenizer_config.json"
    data = json.loads(tok_cfg.read_text(encoding="utf-8"))
    data["tokenizer_class"] = "PreTrainedTokenizerFast"
    data["chat_template"] = chat_template
    tok_cfg.write_text(json.dumps(data), encoding="utf-8")
    (out / "chat_template.jinja").unlink(missing_ok=True)
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    rope = cfg.get("rope_parameters") or {}
    cfg.setdefault("rope_theta", rope.get("rope_theta", 10000.0))
    cfg_path.write_text(json.dumps(cfg), encoding="utf-8")


def canonicalise_json(out: Path) -> None:
    """Rewrite every JSON file with sorted keys: byte-stable regardless of dict insertion order."""
    for path in sorted(out.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="directory to write the checkpoint into")
    ap.add_argument("--spec-json", required=True, help="GeneratedModel fields as JSON")
    ap.add_argument("--corpus", type=Path, nargs="+", required=True, help="text files to train the tokenizer on")
    args = ap.parse_args(argv)

    spec = {**DEFAULTS, **json.loads(args.spec_json)}
    unknown = sorted(set(spec) - set(DEFAULTS))
    if unknown:
        print(f"modelgen: unknown spec fields {unknown}; known: {sorted(DEFAULTS)}", file=sys.stderr)
        return 2
    missing = [str(p) for p in args.corpus if not p.is_file()]
    if missing:
        print(f"modelgen: corpus files not found: {missing}", file=sys.stderr)
        return 2
    build(args.out, spec, args.corpus)
    print(f"modelgen: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
