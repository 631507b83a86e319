"""Benchmark prompts: a nonce at the very front, seeded content behind it, calibrated length.

The nonce defeats the prefix cache (DOMAIN rule 1); the content is seeded so a rerun
replays the same text behind fresh nonces (reproducible, never cached).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources

Tokenize = Callable[[str], Awaitable[int]]


@dataclass(frozen=True)
class Prompt:
    text: str
    tokens: int
    nonce: str


@cache
def class_text(prompt_class: str) -> str:
    return resources.files("specwatch").joinpath(f"data/prompts/{prompt_class}.txt").read_text()


def nonce(namespace: str, *parts: object) -> str:
    return hashlib.sha256(":".join(map(str, (namespace, *parts))).encode()).hexdigest()[:16]


def seeded_content(prompt_class: str, seed: int, index: int, min_chars: int) -> str:
    """A window of the class text starting at a seeded line, wrapped around as needed."""
    text = class_text(prompt_class)
    starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n" and i + 1 < len(text)]
    start = random.Random(f"{seed}:{prompt_class}:{index}").choice(starts)
    body = text[start:] + text[:start]
    return (body * (min_chars // len(body) + 1))[:min_chars]


async def calibrated(front: str, content: str, target: int, tokenize: Tokenize) -> tuple[str, int]:
    """Longest `front + content[:n]` whose token count is <= target, found by bisection on n.

    Word-count heuristics under-pad by ~1.2x (DOMAIN rule 2), so the server's own
    tokenizer decides. Character steps move the count by at most one token at a time
    for byte-level BPE, so the result lands within one token of the target.
    """
    lo, hi = 0, len(content)
    best = (front, await tokenize(front))
    if best[1] > target:
        return best
    while lo < hi:
        mid = (lo + hi + 1) // 2
        count = await tokenize(front + content[:mid])
        if count <= target:
            lo, best = mid, (front + content[:mid], count)
        else:
            hi = mid - 1
    return best


async def build_prompt(
    prompt_class: str, seed: int, index: int, namespace: str, target_tokens: int, tokenize: Tokenize
) -> Prompt:
    tag = nonce(namespace, prompt_class, index)
    front = f"unique request {tag} "
    # ~12 chars per token is far more than any tokenizer needs, so bisection always has room.
    content = seeded_content(prompt_class, seed, index, target_tokens * 12)
    text, tokens = await calibrated(front, content, target_tokens, tokenize)
    return Prompt(text=text, tokens=tokens, nonce=tag)


def repetition_ratio(token_ids: list[int]) -> float | None:
    """1 - distinct 3-grams / total 3-grams: near 1 inside a degenerate repetition loop."""
    grams = [tuple(token_ids[i : i + 3]) for i in range(len(token_ids) - 2)]
    if not grams:
        return None
    return 1.0 - len(set(grams)) / len(grams)
