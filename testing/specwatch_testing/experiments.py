"""Experiment documents for tests: two endpoint images, a baseline and a candidate arm."""

from __future__ import annotations

from typing import Any

# For tests about faults, not the client's capacity: on a loaded CI host the client-saturation gates
# would reject healthy cells and hide what a fault did to them.
LOOSE_CLIENT_GATES = {"client_loop_lag_ms": 5000, "client_cpu_share": 1.0, "client_send_lateness_ms": 5000}


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
    }
