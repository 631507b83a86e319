"""Request protocols, by name: how one benchmark request is written and how its stream is read.

A protocol turns a calibrated prompt into a request body for its endpoint, and one streamed
`choices[i]` object into the text and token ids it carries. The client does the timing and
the counting; a protocol only knows the wire format.
"""

from __future__ import annotations

from typing import Any, Protocol

from specwatch.bench.prompts import Prompt
from specwatch.spec import SamplingSpec


class RequestProtocol(Protocol):
    name: str
    path: str

    def body(self, model: str, prompt: Prompt, max_tokens: int, sampling: SamplingSpec) -> dict[str, Any]: ...

    def delta(self, choice: dict[str, Any]) -> tuple[str, list[int]]:
        """The text and token ids one streamed choice carries (empty when it carries none)."""
        ...


PROTOCOLS: dict[str, RequestProtocol] = {}


def register(protocol: RequestProtocol) -> RequestProtocol:
    PROTOCOLS[protocol.name] = protocol
    return protocol


def protocol_for(name: str) -> RequestProtocol:
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise KeyError(f"unknown request protocol {name!r}; known: {', '.join(sorted(PROTOCOLS))}") from None


def sampling_fields(max_tokens: int, sampling: SamplingSpec) -> dict[str, Any]:
    """Pinned sampling and a fixed output length (min_tokens == max_tokens, ignore_eos: DOMAIN rule 4)."""
    body: dict[str, Any] = {
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
        "stream": True,
        # Tokens are counted from usage, never from chunks (DOMAIN rule 3).
        "stream_options": {"include_usage": True},
        # vLLM then sends each chunk's token ids: byte-fragment tokens can arrive with empty text.
        "return_token_ids": True,
    }
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    return body


class Completions:
    """`/v1/completions` with a raw prompt."""

    name = "completions"
    path = "/v1/completions"

    def body(self, model: str, prompt: Prompt, max_tokens: int, sampling: SamplingSpec) -> dict[str, Any]:
        return {"model": model, "prompt": prompt.text, **sampling_fields(max_tokens, sampling)}

    def delta(self, choice: dict[str, Any]) -> tuple[str, list[int]]:
        return choice.get("text") or "", choice.get("token_ids") or []


register(Completions())
