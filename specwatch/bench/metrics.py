"""vLLM's Prometheus `/metrics`: snapshots and the windowed deltas a cell is measured by.

Figures are always over a window (after - before), never lifetime totals, and the
`_created` samples (Unix timestamps, not counters) are never read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from specwatch.records import SpecWindow

COUNTERS: dict[str, str] = {
    "num_drafts": "vllm:spec_decode_num_drafts_total",
    "num_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "server_prompt_tokens": "vllm:prompt_tokens_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "preemptions": "vllm:num_preemptions_total",
}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


@dataclass(frozen=True)
class MetricsSnapshot:
    """Sums over label sets (engines, models) of the samples specwatch reads."""

    totals: dict[str, float] = field(default_factory=dict)
    per_position: dict[int, float] = field(default_factory=dict)
    kv_cache_tokens: int | None = None  # capacity, from vllm:cache_config_info (summed over engines)
    error: str | None = None  # why there are no counters: /metrics failed or did not parse


    @property
    def positions(self) -> int:
        """How many speculative positions the server reports: its k, once it has drafted."""
        return len(self.per_position)


CACHE_CONFIG_INFO = "vllm:cache_config_info"
_KV_USAGE_LINE = re.compile(r"^vllm:kv_cache_usage_perc(?:\{[^}]*\})?\s+(\S+)", re.MULTILINE)


def _floats(values: list[str]) -> list[float]:
    """The samples that are numbers: a malformed line is skipped, never an exception in a cell's loop."""
    out = []
    for v in values:
        try:
            out.append(float(v))
        except ValueError:
            continue
    return out


def kv_cache_usage(text: str) -> float | None:
    """vllm:kv_cache_usage_perc (a 0..1 share despite its name), fullest engine; a regex, like running_requests."""
    values = _floats(_KV_USAGE_LINE.findall(text))
    return max(values) if values else None


def _capacity(labels: dict[str, str]) -> int | None:
    """Tokens one engine's KV cache holds: newer vLLM labels it (group-aware), else blocks x block size."""
    if (tokens := labels.get("kv_cache_size_tokens", "")).isdigit():
        return int(tokens)
    blocks, size = labels.get("num_gpu_blocks", ""), labels.get("block_size", "")
    return int(blocks) * int(size) if blocks.isdigit() and size.isdigit() else None


_RUNNING_LINE = re.compile(r"^vllm:num_requests_running(?:\{[^}]*\})?\s+(\S+)", re.MULTILINE)


def running_requests(text: str) -> float | None:
    """Just the running-requests gauge, summed over engines.

    Sampled every 0.2 s on the benchmark's event loop while streams are timed: the full
    parse of vLLM's ~670-line exposition takes ~9 ms there, and every chunk arriving
    meanwhile would be stamped late; a regex over the text takes well under 1 ms.
    """
    values = _floats(_RUNNING_LINE.findall(text))
    return sum(values) if values else None


class MetricsError(ValueError):
    """/metrics answered with text that is not Prometheus exposition (or not vLLM's labels)."""


def parse_metrics(text: str) -> MetricsSnapshot:
    """The counters specwatch reads; MetricsError (one line, no traceback) when the text does not parse."""
    try:
        return _parse(text)
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise MetricsError(f"/metrics did not parse: {type(exc).__name__}: {' '.join(str(exc).split())[:120]}") \
            from None


def _parse(text: str) -> MetricsSnapshot:
    wanted = {name: key for key, name in COUNTERS.items()}
    totals: dict[str, float] = {}
    per_position: dict[int, float] = {}
    capacities: list[int] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == CACHE_CONFIG_INFO and (tokens := _capacity(sample.labels)) is not None:
                capacities.append(tokens)
            elif sample.name in wanted:
                key = wanted[sample.name]
                totals[key] = totals.get(key, 0.0) + sample.value
            elif sample.name == PER_POSITION:
                pos = int(sample.labels["position"])
                per_position[pos] = per_position.get(pos, 0.0) + sample.value
    return MetricsSnapshot(totals=totals, per_position=per_position,
                           kv_cache_tokens=sum(capacities) if capacities else None)


def window(before: MetricsSnapshot, after: MetricsSnapshot) -> SpecWindow:
    """Counter deltas; a counter the server does not expose stays None, never 0 (nor does any when a
    snapshot failed: a delta against a missing snapshot would be a lifetime total)."""
    if before.error or after.error:
        return SpecWindow()

    def delta(key: str) -> float | None:
        if key not in after.totals:
            return None
        return after.totals[key] - before.totals.get(key, 0.0)

    positions = None
    if after.per_position:
        positions = [
            after.per_position[p] - before.per_position.get(p, 0.0) for p in sorted(after.per_position)
        ]
    return SpecWindow(**{key: delta(key) for key in COUNTERS}, accepted_per_position=positions)
