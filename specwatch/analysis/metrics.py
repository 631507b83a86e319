"""The metrics a verdict can judge (`verdict.metrics`), by name: which CellResult figure each
reads, which direction is better, and its unit.

Each metric's replicate is the cell's figure in one launch (block), compared over paired blocks
like decode tok/s always was.
"""

from __future__ import annotations

from dataclasses import dataclass

from specwatch.records import CellResult


@dataclass(frozen=True)
class Metric:
    attribute: str  # a CellResult field or computed field
    higher_is_better: bool
    unit: str
    label: str

    def value(self, cell: CellResult) -> float | None:
        value = getattr(cell, self.attribute)
        return None if value is None else float(value)


METRICS: dict[str, Metric] = {
    "decode_tok_s": Metric("decode_tok_s_median", True, "tok/s", "decode tok/s (median stream)"),
    "aggregate_tok_s": Metric("aggregate_tok_s", True, "tok/s", "aggregate tok/s (all streams / wall)"),
    "ttft": Metric("ttft_s_median", False, "s", "TTFT (median)"),
    "tpot": Metric("tpot_ms_median", False, "ms", "TPOT (median)"),
    "ttft_ms_p99": Metric("ttft_ms_p99", False, "ms", "TTFT p99 (null under 100 requests)"),
    "tpot_ms_p99": Metric("tpot_ms_p99", False, "ms", "TPOT p99 (null under 100 requests)"),
    "itl_ms_p99": Metric("itl_ms_p99", False, "ms", "ITL p99, chunk gaps (null under 100 requests)"),
    "e2e_ms_p99": Metric("e2e_ms_p99", False, "ms", "E2E p99 (null under 100 requests)"),
    "goodput_share": Metric("goodput_share", True, "ratio", "goodput share (requests within every SLO)"),
    "goodput_tok_s": Metric("goodput_tok_s", True, "tok/s", "goodput tok/s (tokens of requests within the SLO)"),
}


def unknown_metrics(names: list[str]) -> str | None:
    """None when every name is registered; else the one-line problem, listing the known names."""
    bad = [n for n in names if n not in METRICS]
    if not bad:
        return None
    return f"unknown metric(s) {', '.join(map(repr, bad))}; known metrics: {', '.join(METRICS)}"
