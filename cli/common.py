"""What every command shares: the consoles, the --db option, and the one-line failure."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from specwatch import paths

# Piped output (CI logs, `tee`) would otherwise be cut to 80 columns and the verdict table squeezed.
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, soft_wrap=True)

DbOption = Annotated[Path | None, typer.Option("--db", help="DuckDB file (default $SPECWATCH_HOME/specwatch.duckdb)")]


def fail(message: str, code: int = 1) -> typer.Exit:
    """One line on stderr and the exit code; the message is text, never markup (an interval's brackets)."""
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False)
    return typer.Exit(code)


def existing_db(db: Path | None) -> Path:
    path = db or paths.default_db()
    if not path.exists():
        raise fail(f"no database at {path}; run an experiment first or pass --db")
    return path
