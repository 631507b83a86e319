"""Benchmark prompts: a nonce at the very front, seeded content behind it, calibrated length.

The nonce defeats the prefix cache (measurement rule 1); the content is seeded so a rerun
replays the same text behind fresh nonces (reproducible, never cached).

A prompt is a conversation (role/content messages): `/v1/chat/completions` sends it as
messages through the model's chat template, `/v1/completions` sends its contents joined by
newlines. Where prompts come from is a registry of sources: the shipped single-turn classes,
the multi-turn classes (turn n+1 extends turn n on purpose), and a user's JSONL corpus.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Protocol

from specwatch.analysis.loops import before_eos

Message = dict[str, str]  # {"role": "user" | "assistant" | "system", "content": text}
Conversation = tuple[Message, ...]
Count = Callable[[Conversation], Awaitable[int]]  # the server's token count of a conversation, as sent


@dataclass(frozen=True)
class Prompt:
    messages: Conversation
    tokens: int
    nonce: str | None  # None: sent as written (workload.nonce: false)
    max_tokens: int | None = None  # the request's own output length (a corpus line's output_tokens)

    @property
    def text(self) -> str:
        return as_text(self.messages)


def as_text(messages: Conversation) -> str:
    """What a raw-prompt protocol sends for a conversation: the contents, one message per line."""
    return "\n".join(m["content"] for m in messages)


def user(text: str) -> Conversation:
    return ({"role": "user", "content": text},)


@dataclass(frozen=True)
class PromptRequest:
    """What one prompt is built from: request `index` of a cell whose nonces live in `namespace`."""

    seed: int
    index: int
    namespace: str
    target_tokens: int
    fronted: bool = True  # a nonce at the front of the first message
    streams: int = 1  # the cell's concurrency: requests sent side by side


class PromptSource(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def reuses_prefixes(self) -> bool:
        """Requests share prefixes on purpose: the prefix-cache gate cannot apply."""
        ...

    @property
    def sized(self) -> bool:
        """Prompts are sized to workload.prompt_tokens (a corpus's are sent as written)."""
        ...

    async def prompt(self, req: PromptRequest, count: Count) -> Prompt: ...


@cache
def class_text(prompt_class: str) -> str:
    return resources.files("specwatch").joinpath(f"data/prompts/{prompt_class}.txt").read_text()


def nonce(namespace: str, *parts: object) -> str:
    return hashlib.sha256(":".join(map(str, (namespace, *parts))).encode()).hexdigest()[:16]


def front(tag: str) -> str:
    return f"unique request {tag} "


def _line_starts(text: str) -> list[int]:
    return [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n" and i + 1 < len(text)]


def seeded_content(prompt_class: str, seed: int, index: int, min_chars: int) -> str:
    """A window of the class text starting at a seeded line, wrapped around as needed."""
    text = class_text(prompt_class)
    start = random.Random(f"{seed}:{prompt_class}:{index}").choice(_line_starts(text))
    body = text[start:] + text[:start]
    return (body * (min_chars // len(body) + 1))[:min_chars]


async def calibrated(build: Callable[[int], Conversation], size: int, target: int,
                     count: Count) -> tuple[Conversation, int]:
    """Longest `build(n)`, n in 0..size, whose token count is <= target, found by bisection on n.

    Word-count heuristics under-pad by ~1.2x (measurement rule 2), so the server's own
    tokenizer decides (through the chat template, for chat). Character steps move the count
    by at most one token at a time for byte-level BPE, so the result lands within one token
    of the target.
    """
    lo, hi = 0, size
    best = (build(0), await count(build(0)))
    if best[1] > target:
        return best
    while lo < hi:
        mid = (lo + hi + 1) // 2
        tokens = await count(build(mid))
        if tokens <= target:
            lo, best = mid, (build(mid), tokens)
        else:
            hi = mid - 1
    return best


@dataclass(frozen=True)
class SingleTurn:
    """One user message: the nonce, then a seeded window of the class text, calibrated to the target."""

    name: str
    reuses_prefixes = False
    sized = True

    async def prompt(self, req: PromptRequest, count: Count) -> Prompt:
        tag = nonce(req.namespace, self.name, req.index)
        messages, tokens = await self.fill(req, front(tag) if req.fronted else "", count)
        return Prompt(messages, tokens, tag if req.fronted else None)

    async def fill(self, req: PromptRequest, head: str, count: Count) -> tuple[Conversation, int]:
        """`head` and then content, calibrated to the request's target."""
        # ~12 chars per token is far more than any tokenizer needs, so bisection always has room.
        content = seeded_content(self.name, req.seed, req.index, req.target_tokens * 12)
        return await calibrated(lambda n: user(head + content[:n]), len(content), req.target_tokens, count)


@dataclass(frozen=True)
class MultiTurn:
    """Conversations of `turns` requests: each turn's prompt is the previous turn's, continued.

    The class text alternates lines, a user line and then the assistant's reply; a
    conversation is a seeded run of them (starting on a user line), and turn t sends its first
    (t+1)/turns of the target in tokens, cut at a character and split into messages at line
    ends. So each turn's prompt is a prefix of the next one's (the text exactly; the rendered
    chat up to the cut) and the prefix cache hits on purpose, as it does for real chat traffic.
    The turns of one conversation share its nonce; conversations do not. Requests go out in
    index order, `streams` side by side: one wave holds turn t of `streams` conversations and
    the next wave their turn t+1, so a turn is sent after its predecessor was served.
    """

    name: str
    turns: int = 4
    reuses_prefixes = True
    sized = True

    def _lines(self, seed: int, conversation: int, min_chars: int) -> list[str]:
        lines = class_text(self.name).splitlines()
        pairs = len(lines) // 2
        start = 2 * random.Random(f"{seed}:{self.name}:{conversation}").randrange(pairs)
        out: list[str] = []
        while sum(map(len, out)) < min_chars:
            out.append(lines[(start + len(out)) % (2 * pairs)])
        return out

    async def prompt(self, req: PromptRequest, count: Count) -> Prompt:
        wave, lane = divmod(req.index, req.streams)
        group, turn = divmod(wave, self.turns)
        conversation = group * req.streams + lane
        tag = nonce(req.namespace, self.name, "conversation", conversation)
        head = front(tag) if req.fronted else ""
        lines = self._lines(req.seed, conversation, req.target_tokens * 12)

        def build(n: int) -> Conversation:
            out, left = [], n
            for j, line in enumerate(lines):
                if j and left <= 0:
                    break
                out.append({"role": ("user", "assistant")[j % 2], "content": (head if j == 0 else "") + line[:left]})
                left -= len(line)
            return tuple(out)

        target = max(1, req.target_tokens * (turn + 1) // self.turns)
        messages, tokens = await calibrated(build, sum(map(len, lines)), target, count)
        return Prompt(messages, tokens, tag if req.fronted else None)


@cache
def _words() -> tuple[str, ...]:
    """Every distinct word of the shipped class texts, sorted: the generator's vocabulary."""
    found: set[str] = set()
    for path in resources.files("specwatch").joinpath("data/prompts").iterdir():
        found.update(w for w in path.read_text().lower().split() if w.isascii() and w.isalpha())
    return tuple(sorted(found))


def generated_text(seed: int, index: int, min_chars: int) -> str:
    """Seeded sentences of words drawn from the class texts' vocabulary, at least `min_chars` long.

    A class text is 6.6-8.1 KB and wraps around, so a deep prompt built from one would be that text
    many times over, which inflates ngram acceptance; drawn words do not repeat a 3-word run by
    design (a few thousand words: ~1e10 triples). The stream is the same for a seed and index, so a
    longer text starts with the shorter one (calibration only cuts it).
    """
    words, rng, parts, size = _words(), random.Random(f"{seed}:generated:{index}"), [], 0
    while size < min_chars:
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(6, 18)))
        part = sentence[0].upper() + sentence[1:] + (".\n" if rng.random() < 0.2 else ". ")
        parts.append(part)
        size += len(part)
    return "".join(parts)


async def calibrated_iterative(build: Callable[[int], Conversation], size: int, target: int,
                               count: Count) -> tuple[Conversation, int]:
    """Longest `build(n)`, n in 0..size, whose token count is <= target, in few /tokenize calls.

    Deep prompts make each /tokenize call cost the server a full tokenization, and plain bisection
    over characters takes ~20 of them at 32K tokens. Here the next length comes from the measured
    characters per token (a secant step inside the bracket), and every other step halves the
    bracket, so it converges in 7-10 calls (measured, 1K-32K), and at worst in twice bisection's number
    it took. Like `calibrated`, the result lands within one token of the target.
    """
    lo, lo_tokens = 0, await count(build(0))
    if lo_tokens > target:
        return build(0), lo_tokens
    hi, hi_tokens = size + 1, None  # hi: shortest length known to exceed the target (size + 1: none yet)
    secant = True
    while hi - lo > 1 and lo_tokens < target:
        if secant:
            chars_per_token = (lo / (lo_tokens - 0.5)) if lo and lo_tokens > 1 else 4.0
            if hi_tokens is not None:
                chars_per_token = (hi - lo) / max(hi_tokens - lo_tokens, 1)
            n = lo + int((target - lo_tokens) * chars_per_token)
        else:
            n = (lo + hi) // 2
        n = min(max(n, lo + 1), hi - 1)
        tokens = await count(build(n))
        if tokens <= target:
            lo, lo_tokens = n, tokens
        else:
            hi, hi_tokens = n, tokens
        secant = not secant
    return build(lo), lo_tokens


@dataclass(frozen=True)
class Generated(SingleTurn):
    """The nonce, then seeded non-repeating sentences (`generated_text`), calibrated iteratively."""

    async def fill(self, req: PromptRequest, head: str, count: Count) -> tuple[Conversation, int]:
        size = req.target_tokens * 8  # the demo tokenizer takes ~3-4 chars a token, BPE on English ~4-5
        while True:
            content = generated_text(req.seed, req.index, size)
            if await count(user(head + content)) > req.target_tokens:
                break
            size *= 2
        return await calibrated_iterative(lambda n: user(head + content[:n]), len(content), req.target_tokens, count)


SOURCES: dict[str, PromptSource] = {}


def register(source: PromptSource) -> PromptSource:
    SOURCES[source.name] = source
    return source


for _name in ("code", "json", "prose", "translation", "summarization", "qa", "math", "rag"):
    register(SingleTurn(_name))
register(MultiTurn("multiturn"))
register(Generated("generated"))


def repetition_ratio(token_ids: list[int]) -> float | None:
    """1 - distinct 3-grams / total 3-grams: near 1 inside a degenerate repetition loop."""
    grams = [tuple(token_ids[i : i + 3]) for i in range(len(token_ids) - 2)]
    if not grams:
        return None
    return 1.0 - len(set(grams)) / len(grams)


def judged_output(token_ids: list[int], eos_token_ids: Collection[int]) -> dict[str, Any]:
    """A request's repetition ratio on its output before the first EOS, and that part's length (None
    where no EOS ids are known): the RequestSample fields (analysis/loops.py says why)."""
    meant = before_eos(token_ids, eos_token_ids)
    return {"repetition_ratio": repetition_ratio(meant),
            "pre_eos_tokens": len(meant) if eos_token_ids and token_ids else None}
