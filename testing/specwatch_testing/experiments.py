"""Experiment documents for tests: two endpoint images, a baseline and a candidate arm."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

# For tests about faults or ranks, not the client's capacity: on a loaded CI host the client-saturation
# gates would reject healthy cells and hide what the test is about.
LOOSE_CLIENT_GATES = {"client_loop_lag_ms": 5000, "client_cpu_share": 1.0, "client_send_lateness_ms": 5000}
# For tests not about interference: no cell is contaminated by the host's other work (thresholds.host_*: no
# foreign share exceeds the whole host), so no launch is run again for a loaded CI host.
# tests/test_interference.py is what tests that gate.
ANY_HOST = {"host_foreign_cpu": 1.0, "host_steal": 1.0}
LOADED_HOST = {**LOOSE_CLIENT_GATES, **ANY_HOST}  # both, for a whole experiment on a loaded host

# What a loaded 2-core CI host does to a healthy cell of a CPU server: the client, or the API server
# that shares its core, is starved of CPU, and the gates reject the cell for it, rightly (measured:
# one core kept busy gave "client saturated" in every cell, half a core "arrived in one burst").
# Tests of the flow accept a rejection that says so, and no other.
HOST_STARVED = re.compile(r"client saturated|arrived in one burst")


def accepted_or_host_starved(rejected: bool, reason: str | None) -> bool:
    return not rejected or bool(reason and HOST_STARVED.search(reason))


def endpoint_ab(name: str, base_url: str, cand_url: str, design: dict[str, Any],
                workload: dict[str, Any]) -> dict[str, Any]:
    """An A/B of two running servers (endpoint images), both arms ngram k=3."""
    ngram = {"method": "ngram", "k": 3, "prompt_lookup_max": 4}
    return {
        "name": name,
        "model": {"generate": {}, "served_name": "demo"},
        "images": [{"name": "old", "backend": "endpoint", "url": base_url},
                   {"name": "new", "backend": "endpoint", "url": cand_url}],
        "arms": [{"name": "base", "image": "old", "speculative": ngram},
                 {"name": "cand", "image": "new", "speculative": ngram}],
        "baseline": "base",
        "design": design,
        "workload": workload,
        "thresholds": LOADED_HOST,  # a test that gates on the host's load sets its own (test_interference.py)
    }


FAKE_SERVE = ("{python} -m specwatch_testing.fake_vllm --port {port} --served-model-name {served_name} "
              "--spec-config {spec_config} --step-ms 3 --accept-probs 0.9,0.8,0.7 {args}")


def command_ab(name: str, checkpoint: str, python: str, env: dict[str, str] | None = None,
               args: list[str] | None = None) -> dict[str, Any]:
    """A small A/B the flow launches itself: two command-launcher arms serving fake_vllm (k=2 vs k=3)
    from a `python` image (the interpreter that has specwatch_testing) and a checkpoint dir with a
    config.json. `env` and `args` go to both arms."""
    def arm(arm_name: str, k: int) -> dict[str, Any]:
        return {"name": arm_name, "image": "here", "launcher": "command", "command": FAKE_SERVE,
                "speculative": {"method": "ngram", "k": k, "prompt_lookup_max": 4}, "boot_timeout_s": 60,
                "env": env or {}, "args": args or []}

    return {
        "name": name,
        "model": {"path": checkpoint, "served_name": "demo"},
        "images": [{"name": "here", "backend": "python", "python": python}],
        "arms": [arm("k2", 2), arm("k3", 3)],
        "baseline": "k2",
        "thresholds": LOADED_HOST,  # a test that gates on the host's load sets its own (test_interference.py)
        "design": {"rounds": 1, "probes": 1, "probe_tokens": 8},
        "workload": {"prompt_classes": ["code"], "prompt_tokens": 32, "max_tokens": 16, "concurrency": [1],
                     "requests_per_cell": 2, "warmup_requests": 1},
    }


def fake_checkpoint(folder: Path) -> Path:
    """A checkpoint dir that passes the checkpoint check (config.json only): fake_vllm needs no weights."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                                    "max_position_embeddings": 4096}))
    return folder
