"""A user's own prompts as JSONL (`workload.corpus`): one request per line.

Each line is `{"prompt": "..."}` or `{"messages": [{"role": "user", "content": "..."}, ...]}`,
with an optional `output_tokens` (the request's own output length, named as in vLLM's custom
dataset). The file is read when the spec is validated, so a bad line stops the run before any
server boots; the cell reads it again when it builds its prompts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from specwatch.bench.prompts import (
    SOURCES,
    Conversation,
    Count,
    Prompt,
    PromptRequest,
    PromptSource,
    front,
    nonce,
    user,
)
from specwatch.spec import WorkloadSpec, corpus_name

ROLES = ("system", "user", "assistant")
LINE_FIX = ('write each line as {"prompt": "..."} or {"messages": [{"role": "user", "content": "..."}]}, '
            'optionally with "output_tokens": N')


@dataclass(frozen=True)
class CorpusLine:
    messages: Conversation
    output_tokens: int | None = None


def _messages(value: Any) -> Conversation | str:
    """The line's conversation, or what is wrong with it."""
    if not isinstance(value, list) or not value:
        return "messages is not a non-empty list"
    for i, m in enumerate(value):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            return f"messages[{i}] is not {{\"role\": {' | '.join(ROLES)}, \"content\": a string}}"
    return tuple({"role": m["role"], "content": m["content"]} for m in value)


def parse_line(text: str) -> CorpusLine | str:
    """One JSONL line, or what is wrong with it."""
    try:
        item = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"not JSON ({exc.msg})"
    if not isinstance(item, dict):
        return "not a JSON object"
    if ("prompt" in item) == ("messages" in item):
        return "has both prompt and messages" if "prompt" in item else "has neither prompt nor messages"
    if "prompt" in item:
        if not isinstance(item["prompt"], str) or not item["prompt"]:
            return "prompt is not a non-empty string"
        messages: Conversation | str = user(item["prompt"])
    else:
        messages = _messages(item["messages"])
    if isinstance(messages, str):
        return messages
    out = item.get("output_tokens")
    if out is not None and (not isinstance(out, int) or isinstance(out, bool) or out < 1):
        return f"output_tokens {out!r} is not a whole number >= 1"
    return CorpusLine(messages, out)


def read_corpus(path: Path) -> tuple[CorpusLine, ...]:
    """Every request line of the file; ValueError naming the file, the line and the fix on the first bad one."""
    try:
        text = path.expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, RuntimeError) as exc:  # RuntimeError: ~user with no such user
        raise ValueError(f"{str(path)!r} cannot be read ({type(exc).__name__}); point it at a JSONL file") from None
    lines = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        parsed = parse_line(raw)
        if isinstance(parsed, str):
            raise ValueError(f"{path} line {number}: {parsed}; fix: {LINE_FIX}")
        lines.append(parsed)
    if not lines:
        raise ValueError(f"{path} holds no request lines; fix: {LINE_FIX}")
    return tuple(lines)


@dataclass(frozen=True)
class Corpus:
    """Request i sends line i (wrapping around), nonce-fronted unless the workload opts out."""

    path: Path
    reuses_prefixes = False
    sized = False

    @property
    def name(self) -> str:
        return corpus_name(self.path)

    @cached_property
    def lines(self) -> tuple[CorpusLine, ...]:
        return read_corpus(self.path)

    async def prompt(self, req: PromptRequest, count: Count) -> Prompt:
        line = self.lines[req.index % len(self.lines)]
        tag = nonce(req.namespace, self.name, req.index)
        messages = line.messages
        if req.fronted:  # at the start of the first message: the template's shared tokens come before it
            first = {**messages[0], "content": front(tag) + messages[0]["content"]}
            messages = (first, *messages[1:])
        return Prompt(messages, await count(messages), tag if req.fronted else None, line.output_tokens)


@cache
def _corpus(path: Path) -> Corpus:
    return Corpus(path)  # one per file and process: its lines are read once, not once per cell


def sources(workload: WorkloadSpec) -> list[PromptSource]:
    """Where a workload's prompts come from: its corpus, else its prompt classes, in cell order."""
    if workload.corpus is not None:
        return [_corpus(workload.corpus)]
    return [SOURCES[c] for c in workload.prompt_classes]


def source_for(workload: WorkloadSpec, prompt_class: str) -> PromptSource:
    """The source a cell's prompts come from (its key's prompt_class)."""
    return next(s for s in sources(workload) if s.name == prompt_class)
