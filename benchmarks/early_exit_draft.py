"""How good is an early-exit draft (the first N layers of a checkpoint, its final norm and tied
head) for `draft_model` speculation, for every N at once, without a server.

Run by an image's python (it needs torch and transformers), on a converted checkpoint:

    IMAGE_PYTHON benchmarks/early_exit_draft.py CHECKPOINT [--k 7] [--prompts 3] [--tokens 128]

Greedy, teacher-forced: the full model writes each continuation through its chat template; then
one forward pass with every layer's hidden state gives, for each N, whether the N-layer draft's
argmax agrees with the next token at each position. A draft's tokens at positions 0..j of a step
are all accepted exactly when the agreements at t..t+j all hold (while they hold the draft sees
the target's own tokens, and its first N layers compute what the target's first N layers do), so
the per-position curve is the share of starting points t with a run of j+1 agreements.

Draft cost per token, relative to the target's: the MACs of N layers plus the head, over 30 layers
plus the head (attention projections + MLP; attention scores are small at these lengths).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PROMPTS = Path(__file__).resolve().parents[1] / "specwatch" / "data" / "prompts"
ASKS = {"code": "Explain what this code does, then extend it with one more method:\n\n",
        "prose": "Continue this story for a few paragraphs:\n\n"}


def prompts(cls: str, count: int) -> list[str]:
    text = (PROMPTS / f"{cls}.txt").read_text(encoding="utf-8")
    step = max(1, len(text) // (count + 1))
    return [ASKS[cls] + text[i * step:i * step + 800] for i in range(count)]


def agreements(model, tok, prompt: str, tokens: int):  # type: ignore[no-untyped-def]
    import torch

    ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=tokens, do_sample=False, min_new_tokens=tokens)
        hidden = model(out, output_hidden_states=True).hidden_states
        start = ids.shape[1] - 1  # the logit at the prompt's last position predicts the first new token
        target = out[0, start + 1:]
        rows = []
        for n in range(1, len(hidden) - 1):  # hidden[n]: the output of the first n layers, before the norm
            logits = model.lm_head(model.model.norm(hidden[n][0, start:-1]))
            rows.append((logits.argmax(-1) == target).tolist())
    return rows, tok.decode(out[0, ids.shape[1]:])


def curve(agree: list[bool], k: int) -> list[float]:
    starts = range(len(agree) - k + 1)
    return [sum(all(agree[t:t + j + 1]) for t in starts) / len(starts) for j in range(k)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--k", type=int, default=7)
    ap.add_argument("--prompts", type=int, default=3, help="per class")
    ap.add_argument("--tokens", type=int, default=128)
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(args.checkpoint)
    model = AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32).eval()
    cfg = model.config
    h, i, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    kv = h * cfg.num_key_value_heads // cfg.num_attention_heads
    layer_macs, head_macs = 2 * h * h + 2 * h * kv + 3 * h * i, h * cfg.vocab_size
    result: dict[str, object] = {"checkpoint": str(args.checkpoint), "k": args.k, "tokens": args.tokens}
    for cls in ASKS:
        per_n: dict[int, list[bool]] = {}
        for prompt in prompts(cls, args.prompts):
            rows, text = agreements(model, tok, prompt, args.tokens)
            print(f"{cls}: {text[:160]!r}", file=sys.stderr)
            for n, row in enumerate(rows, start=1):
                per_n.setdefault(n, []).extend(row)  # runs cross prompt borders: a negligible share
        table = {}
        for n, agree in per_n.items():
            c = curve(agree, args.k)
            cost = (n * layer_macs + head_macs) / (layers * layer_macs + head_macs)
            table[n] = {"p0": round(c[0], 3), "curve": [round(x, 3) for x in c], "cost": round(cost, 3),
                        # tokens per target step over its cost (k draft passes + one verify), both k = 5 and k
                        "speedup_k5": round((1 + sum(c[:5])) / (1 + 5 * cost), 3),
                        f"speedup_k{args.k}": round((1 + sum(c)) / (1 + args.k * cost), 3)}
        result[cls] = table
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
