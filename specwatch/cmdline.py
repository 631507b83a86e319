"""Reading a server's command line: what a flag was set to."""

from __future__ import annotations


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value of `--flag V` or `--flag=V` in a command line (the last one wins, as in argparse)."""
    found = None
    for i, word in enumerate(argv):
        name, eq, value = word.partition("=")
        if name == flag:
            found = value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return found
