"""Secret redaction for everything that stores or prints launch args, env and server logs.

A secret is the value of an env entry or a flag whose name says so (HF_TOKEN, *_KEY, *_SECRET,
*_PASSWORD, --api-key, --hf-token=...). Records and reports carry the names with `***`; free text
(log tails, server logs once the server stops) has every secret value replaced.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

# TOKEN but not TOKENS or TOKENIZER: NUM_SPECULATIVE_TOKENS, MAX_TOKENS and --tokenizer are not credentials.
_NAME = r"TOKEN(?!S|IZER)|KEY|SECRET|PASSWORD"
SECRET_NAME = re.compile(_NAME, re.IGNORECASE)
REDACTED = "***"
# Inside a shell string (a command launcher's `bash -c ...`): `--api-key X`, `--hf-token=X`, `HF_TOKEN=X`.
_VALUE = r"""(?P<value>'[^']*'|"[^"]*"|[^\s'"]+)"""
_FLAG_IN_TEXT = re.compile(rf"(?P<name>(?<![\w-])--?[\w.-]*(?:{_NAME})[\w.-]*)(?P<sep>=|[ \t]+){_VALUE}", re.I)
_ASSIGN_IN_TEXT = re.compile(rf"(?P<name>(?<![\w-])[A-Za-z_]\w*(?:{_NAME})\w*)(?P<sep>=){_VALUE}", re.I)
# Shorter values are not replaced in free text: a secret "1" would turn every 1 in a log into ***.
MIN_SECRET_CHARS = 4


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if SECRET_NAME.search(k) else v) for k, v in env.items()}


def redact_words(text: str) -> str:
    """A shell string with the values of its secret-named flags and assignments hidden."""
    def hide(m: re.Match[str]) -> str:
        return f"{m['name']}{m['sep']}{REDACTED}"

    return _ASSIGN_IN_TEXT.sub(hide, _FLAG_IN_TEXT.sub(hide, text))


def redact_argv(argv: Sequence[str]) -> list[str]:
    """Hide the values of secret-named flags: `--api-key X`, `--hf-token=X`, `NAME=X` words, and the same
    inside a word that is itself a shell string (`bash -c '... --api-key X'`)."""
    out: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        name, eq, _ = word.partition("=")
        if any(c.isspace() for c in word):
            out.append(redact_words(word))
        elif eq and SECRET_NAME.search(name):
            out.append(f"{name}={REDACTED}")
        elif word.startswith("-") and SECRET_NAME.search(word):
            out.append(word)
            hide_next = True
        else:
            out.append(word)
    return out


def secret_values(env: Mapping[str, str] = {}, argv: Iterable[str] = ()) -> list[str]:  # noqa: B006 (read only)
    """The values redact_env and redact_argv hide, longest first (so no secret is half-replaced)."""
    found = {v for k, v in env.items() if SECRET_NAME.search(k)}
    words = list(argv)
    for i, word in enumerate(words):
        for m in (*_FLAG_IN_TEXT.finditer(word), *_ASSIGN_IN_TEXT.finditer(word)):
            found.add(m["value"].strip("'\""))
        if word.startswith("-") and "=" not in word and SECRET_NAME.search(word) and i + 1 < len(words):
            found.add(words[i + 1])
    return sorted((v for v in found if len(v) >= MIN_SECRET_CHARS), key=len, reverse=True)


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """Replace every secret value wherever it appears in free text (a log line, an error)."""
    for value in secrets:
        text = text.replace(value, REDACTED)
    return text



_URL_IN_TEXT = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>]+", re.I)


def redact_url(url: str) -> str:
    """A webhook URL as it may be stored or shown: scheme, host and port only. Its path, query and user
    part are where services put the token (Slack's /services/T../B../<secret>, ?token=...)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # not a URL at all: nothing of it is shown
        return REDACTED
    hidden = parts.path not in ("", "/") or parts.query or parts.fragment or parts.username
    return f"{parts.scheme}://{host}{port}" + (f"/{REDACTED}" if hidden else "")


def redact_urls(text: str) -> str:
    """Every URL in free text (an HTTP client's error names the URL it called) in its redacted form."""
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
