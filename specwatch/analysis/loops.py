"""The loop detector: a generation that fell into a repetition loop, where speculative acceptance is
inflated (the drafter predicts the loop) and so says nothing about the drafter (seed 004: at >= 256K
the model sometimes loops, and acceptance rises while it does).

A loop is judged on what the model meant to write: the output before its first end-of-sequence
token. Requests run with ignore_eos (measurement rule 4), so an instruct model that finished its
answer keeps writing, and that tail repeats by nature; it is reported apart, as its share.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

PHRASE_WORDS = 4  # a phrase of at least this many words ...
PHRASE_REPEATS = 3  # ... seen at least this many times is a loop
LOOP_FLAG = "acceptance inflated by loop"


def repeated_phrase(text: str, words: int = PHRASE_WORDS, repeats: int = PHRASE_REPEATS) -> str | None:
    """The most repeated run of `words` words when it occurs `repeats` times or more, else None.

    A longer phrase repeated that often contains such a run, so counting runs of exactly `words`
    words finds every phrase of `words` or more.
    """
    tokens = text.split()
    runs = Counter(tuple(tokens[i : i + words]) for i in range(len(tokens) - words + 1))
    if not runs:
        return None
    phrase, seen = runs.most_common(1)[0]
    return " ".join(phrase) if seen >= repeats else None


def before_eos(token_ids: list[int], eos_token_ids: Collection[int]) -> list[int]:
    """The output up to (not including) its first end-of-sequence token; all of it without one."""
    return next((token_ids[:i] for i, t in enumerate(token_ids) if t in eos_token_ids), token_ids)


def is_loop(repetition_ratio: float | None, text: str, threshold: float) -> bool:
    """A loop: the 3-gram repetition ratio above `threshold`, or a phrase repeated (`repeated_phrase`)."""
    return (repetition_ratio is not None and repetition_ratio > threshold) or repeated_phrase(text) is not None
