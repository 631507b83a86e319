"""specwatch: continuous performance tracking of vLLM speculative decoding."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # Read on first use: importlib.metadata costs ~20 ms, paid by every benchmark worker otherwise.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("specwatch")
        except PackageNotFoundError:  # running from a source tree that was never installed
            return "0.0.0+src"
    raise AttributeError(f"module 'specwatch' has no attribute {name!r}")
