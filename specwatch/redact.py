"""Secret redaction for everything that stores or prints launch args and env."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

# TOKEN but not TOKENS: NUM_SPECULATIVE_TOKENS and MAX_TOKENS are counts, not credentials.
SECRET_NAME = re.compile(r"TOKEN(?!S)|KEY|SECRET|PASSWORD", re.IGNORECASE)
REDACTED = "***"


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if SECRET_NAME.search(k) else v) for k, v in env.items()}


def redact_argv(argv: Sequence[str]) -> list[str]:
    """Hide the values of secret-named flags: `--api-key X`, `--hf-token=X`, and `NAME=X` words."""
    out: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        name, eq, _ = word.partition("=")
        if eq and SECRET_NAME.search(name):
            out.append(f"{name}={REDACTED}")
        elif word.startswith("-") and SECRET_NAME.search(word):
            out.append(word)
            hide_next = True
        else:
            out.append(word)
    return out


def redact_text(text: str, env: Mapping[str, str]) -> str:
    """Replace the values of secret env entries wherever they appear in free text (e.g. a log line)."""
    for k, v in env.items():
        if v and SECRET_NAME.search(k):
            text = text.replace(v, REDACTED)
    return text
