"""specwatch: continuous performance tracking of vLLM speculative decoding."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("specwatch")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+src"
