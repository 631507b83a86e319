"""The metric catalogue: every per-cell figure that is judged, delta-checked or reported, in one place.

Each metric says how it is computed from a CellResult, which direction is better, its unit, label
and format, whether `verdict.metrics` may judge it, which Great Expectations delta check compares
it and which report column shows it. Everything else reads this table: ingest writes each cell's
values to `cell_metrics` (one row per metric), the delta SQL (sql/checks/*_deltas.sql) joins those
rows with `parameter_rows()` bound as a parameter, the verdict and the report look metrics up here.
A metric computable from a cell's stored data is added here alone: no migration, no SQL, no report
edit.

Each metric's replicate is the cell's figure in one launch (block), compared over paired blocks
like decode tok/s always was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from specwatch.records import CellResult


@dataclass(frozen=True)
class DeltaCheck:
    """A GE delta check: candidate vs baseline arm in a run (`regression.<family>`) and, across runs, this
    point vs its history baseline (`history.<family>`); the detail line shows `label` and `fmt`."""

    family: str
    label: str
    fmt: str
    in_run: bool = True  # False: compared across runs only


@dataclass(frozen=True)
class ReportColumn:
    """A column of the report's latency table; metrics naming the same head share it as `p50/p99`."""

    head: str
    fmt: str


@dataclass(frozen=True)
class Metric:
    name: str  # what `verdict.metrics` names
    column: str  # the stored name: cell_metrics.metric and quality_results.metric
    higher_is_better: bool
    unit: str
    label: str
    compute: Callable[[CellResult], float | None]
    judged: bool = False  # may be named in `verdict.metrics`
    check: DeltaCheck | None = None
    # Acceptance figures are bounded by k, so they are compared only between arms of the same k, and a
    # looping sweep point leaves their history (the drafter predicts the loop, inflating acceptance).
    acceptance: bool = False
    report: ReportColumn | None = None

    def value(self, cell: CellResult) -> float | None:
        value = self.compute(cell)
        return None if value is None else float(value)


def _field(name: str) -> Callable[[CellResult], float | None]:
    getter: Callable[[CellResult], float | None] = attrgetter(name)
    return getter


_P99_NOTE = "null under 100 requests"
_DECODE = DeltaCheck("decode_tok_s", "decode tok/s", ".1f")
_GOODPUT = "goodput"
_LATENCY_P99 = "latency_p99"
_TTFT = ReportColumn("TTFT p50/p99 ms", ".0f")
_TPOT = ReportColumn("TPOT p50/p99 ms", ".1f")
_ITL = ReportColumn("ITL p50/p99 ms", ".1f")
_E2E = ReportColumn("E2E p50/p99 ms", ".0f")

CATALOGUE: tuple[Metric, ...] = (
    Metric("decode_tok_s", "decode_tok_s_median", True, "tok/s", "decode tok/s (median stream)",
           _field("decode_tok_s_median"), judged=True, check=_DECODE),
    Metric("aggregate_tok_s", "aggregate_tok_s", True, "tok/s", "aggregate tok/s (all streams / wall)",
           _field("aggregate_tok_s"), judged=True),
    Metric("ttft", "ttft_s_median", False, "s", "TTFT (median)", _field("ttft_s_median"), judged=True,
           check=DeltaCheck("ttft_s", "TTFT s", ".3f", in_run=False)),
    Metric("tpot", "tpot_ms_median", False, "ms", "TPOT (median)", _field("tpot_ms_median"), judged=True),
    Metric("ttft_ms_p50", "ttft_ms_p50", False, "ms", "TTFT p50", _field("ttft_ms_p50"), report=_TTFT),
    Metric("ttft_ms_p99", "ttft_ms_p99", False, "ms", f"TTFT p99 ({_P99_NOTE})", _field("ttft_ms_p99"),
           judged=True, check=DeltaCheck(_LATENCY_P99, "TTFT p99 ms", ".1f"), report=_TTFT),
    Metric("tpot_ms_p50", "tpot_ms_p50", False, "ms", "TPOT p50", _field("tpot_ms_p50"), report=_TPOT),
    Metric("tpot_ms_p99", "tpot_ms_p99", False, "ms", f"TPOT p99 ({_P99_NOTE})", _field("tpot_ms_p99"),
           judged=True, check=DeltaCheck(_LATENCY_P99, "TPOT p99 ms", ".2f"), report=_TPOT),
    Metric("itl_ms_p50", "itl_ms_p50", False, "ms", "ITL p50, chunk gaps", _field("itl_ms_p50"), report=_ITL),
    Metric("itl_ms_p99", "itl_ms_p99", False, "ms", f"ITL p99, chunk gaps ({_P99_NOTE})", _field("itl_ms_p99"),
           judged=True, check=DeltaCheck(_LATENCY_P99, "ITL p99 ms", ".2f"), report=_ITL),
    Metric("e2e_ms_p50", "e2e_ms_p50", False, "ms", "E2E p50", _field("e2e_ms_p50"), report=_E2E),
    Metric("e2e_ms_p99", "e2e_ms_p99", False, "ms", f"E2E p99 ({_P99_NOTE})", _field("e2e_ms_p99"),
           judged=True, check=DeltaCheck(_LATENCY_P99, "E2E p99 ms", ".0f"), report=_E2E),
    Metric("goodput_share", "goodput_share", True, "ratio", "goodput share (requests within every SLO)",
           _field("goodput_share"), judged=True, check=DeltaCheck(_GOODPUT, "goodput share", ".3f"),
           report=ReportColumn("goodput share", ".0%")),
    Metric("goodput_tok_s", "goodput_tok_s", True, "tok/s", "goodput tok/s (tokens of requests within the SLO)",
           _field("goodput_tok_s"), judged=True, check=DeltaCheck(_GOODPUT, "goodput tok/s", ".1f"),
           report=ReportColumn("goodput tok/s", ".1f")),
    Metric("mean_acceptance_length", "mean_acceptance_length", True, "tokens",
           "mean acceptance length (1 + accepted / drafts)", lambda c: c.window.mean_acceptance_length,
           check=DeltaCheck("acceptance_length", "mean acceptance length", ".2f"), acceptance=True),
    Metric("kv_cache_usage_peak", "kv_cache_usage_peak", True, "ratio", "KV-cache usage peak",
           _field("kv_cache_usage_peak"), report=ReportColumn("KV peak", ".0%")),
)

METRICS: dict[str, Metric] = {m.name: m for m in CATALOGUE if m.judged}


# The functions below read CATALOGUE when called, not when defined, so a metric registered on a copy
# of it (a test's) is seen everywhere.


def cell_values(cell: CellResult) -> dict[str, float]:
    """The cell's figure of every catalogue metric it has, by stored name (`cell_metrics` rows)."""
    return {m.column: value for m in CATALOGUE if (value := m.value(cell)) is not None}


def parameter_rows() -> list[dict[str, Any]]:
    """The delta-checked metrics as rows for the `$catalogue` parameter of sql/checks/*_deltas.sql."""
    return [{"metric": m.column, "lower": not m.higher_is_better, "family": m.check.family,
             "in_run": m.check.in_run, "acceptance": m.acceptance}
            for m in CATALOGUE if m.check is not None]


def check_label(column: str) -> tuple[str, str]:
    """(label, format) of a delta-checked metric's detail line; an unknown one is shown by name."""
    return next(((m.check.label, m.check.fmt) for m in CATALOGUE if m.column == column and m.check),
                (column, ".4g"))


def report_columns() -> list[tuple[ReportColumn, list[Metric]]]:
    """The report's latency table columns in catalogue order, each with the metrics it shows."""
    columns: dict[ReportColumn, list[Metric]] = {}
    for m in CATALOGUE:
        if m.report is not None:
            columns.setdefault(m.report, []).append(m)
    return list(columns.items())


def unknown_metrics(names: list[str]) -> str | None:
    """None when every name is registered; else the one-line problem, listing the known names."""
    bad = [n for n in names if n not in METRICS]
    if not bad:
        return None
    return f"unknown metric(s) {', '.join(map(repr, bad))}; known metrics: {', '.join(METRICS)}"
