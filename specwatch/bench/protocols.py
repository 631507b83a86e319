"""Request protocols, by name: how one benchmark request is written and how its stream is read.

A protocol turns a calibrated prompt into a request body for its endpoint, says how the
server's `/tokenize` counts that prompt as sent (calibration), and turns one streamed
`choices[i]` object into the text and token ids it carries. The client does the timing and
the counting; a protocol only knows the wire format.
"""

from __future__ import annotations

from typing import Any, Protocol

from specwatch.bench.prompts import Conversation, Prompt, as_text
from specwatch.spec import SamplingSpec


class RequestProtocol(Protocol):
    name: str
    path: str

    def body(self, model: str, prompt: Prompt, max_tokens: int, sampling: SamplingSpec) -> dict[str, Any]: ...

    def tokenize_body(self, model: str, messages: Conversation) -> dict[str, Any]:
        """The `/tokenize` request that counts `messages` exactly as `body` would send them."""
        ...

    def refused(self, model: str, detail: str) -> str:
        """The one-line error when `/tokenize` refuses this protocol's form (what is missing, and the fix)."""
        ...

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
    """Pinned sampling and a fixed output length (min_tokens == max_tokens, ignore_eos: measurement rule 4)."""
    body: dict[str, Any] = {
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
        "stream": True,
        # Tokens are counted from usage, never from chunks (measurement rule 3).
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

    def tokenize_body(self, model: str, messages: Conversation) -> dict[str, Any]:
        return {"model": model, "prompt": as_text(messages)}

    def refused(self, model: str, detail: str) -> str:
        return f"workload.protocol 'completions': the server cannot tokenize a prompt for {model!r} ({detail})"

    def delta(self, choice: dict[str, Any]) -> tuple[str, list[int]]:
        return choice.get("text") or "", choice.get("token_ids") or []


class Chat:
    """`/v1/chat/completions`: the prompt's messages through the model's own chat template.

    The template puts its shared tokens (BOS, role headers) before the first message, so the
    nonce sits at the start of the first message's content, the earliest place a client owns.
    """

    name = "chat"
    path = "/v1/chat/completions"

    def body(self, model: str, prompt: Prompt, max_tokens: int, sampling: SamplingSpec) -> dict[str, Any]:
        return {"model": model, "messages": list(prompt.messages), **sampling_fields(max_tokens, sampling)}

    def tokenize_body(self, model: str, messages: Conversation) -> dict[str, Any]:
        # The same rendering as the chat request: the template with its generation prompt.
        return {"model": model, "messages": list(messages), "add_generation_prompt": True}

    def refused(self, model: str, detail: str) -> str:
        return (f"workload.protocol 'chat': model {model!r} has no chat template the server can render ({detail}); "
                "fix: give the checkpoint a chat_template in tokenizer_config.json, start the server with "
                "--chat-template, or use protocol: completions")

    def delta(self, choice: dict[str, Any]) -> tuple[str, list[int]]:
        return (choice.get("delta") or {}).get("content") or "", choice.get("token_ids") or []


register(Completions())
register(Chat())
