"""The metric catalogue: every per-cell figure that is judged, delta-checked or reported, in one place.

Each metric says how it is computed from a CellResult, which direction is better, its unit, label
and format, whether `verdict.metrics` may judge it, which Great Expectations delta check compares
it and which report column shows it. Everything else reads this table: ingest writes each cell's
values to `cell_metrics` (one row per metric), the delta SQL (sql/checks/*_deltas.sql) joins those
rows with `parameter_rows()` bound as a parameter, the verdict and the report look metrics up here.

Adding a metric that is computable from what a cell already records (its requests, its counter
window) is one entry here: no migration, no SQL, no report edit. Runs ingested before it have no
rows for it (re-ingest them to compare with them). Only a metric that needs new raw data also
touches the client (specwatch/bench) and records.py.

Each metric's replicate is the cell's figure in one launch (round), compared over paired rounds
like decode tok/s always was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from specwatch.spec.workload import BATCHED_CONCURRENCY

if TYPE_CHECKING:  # at run time the catalogue imports only the spec leaf: resolve imports it
    from specwatch.records import CellResult, RequestSample



@dataclass(frozen=True)
class DeltaCheck:
    """A GE delta check: candidate vs baseline arm in a run (`regression.<family>`) and, across runs, this
    point vs its history baseline (`history.<family>`), failing beyond the noise band."""

    family: str
    in_run: bool = True  # False: compared across runs only


@dataclass(frozen=True)
class ReportColumn:
    """A column of the report's latency table; metrics naming the same head share it as `p50/p99`."""

    head: str
    fmt: str


@dataclass(frozen=True)
class Metric:
    name: str  # what `verdict.metrics` names
    # The stored name: cell_metrics.metric and quality_results.metric (the CellResult field's name
    # where there is one, so stored check rows keep their names).
    column: str
    higher_is_better: bool
    unit: str
    label: str  # check details: "<label> <value> vs baseline <value> (...)"
    fmt: str  # of a value in check details
    compute: Callable[[CellResult], float | None]
    judged: bool = False  # may be named in `verdict.metrics`
    check: DeltaCheck | None = None
    # Acceptance figures are bounded by k, so they are compared only between arms of the same k; a cell
    # that fell into a repetition loop stores none (the drafter predicts the loop, inflating acceptance).
    acceptance: bool = False
    report: ReportColumn | None = None
    # `specwatch history` follows the metric along each series (latest value, change points), naming
    # it so; the first such metric is the series' headline (trend per run, plot).
    trend: str | None = None
    # The same figure per request, where a request has one: the sequential verdict pairs the arms'
    # requests by index within a round (analysis/pairing.py). None: only the cell figure exists.
    request: Callable[[RequestSample], float | None] | None = None
    # The metric judged in its place in a batched closed-loop cell (c >= BATCHED_CONCURRENCY), by name.
    batched: str | None = None

    def value(self, cell: CellResult) -> float | None:
        value = self.compute(cell)
        return None if value is None else float(value)


def _field(name: str) -> Callable[[CellResult], float | None]:
    getter: Callable[[CellResult], float | None] = attrgetter(name)
    return getter


def _host(name: str) -> Callable[[CellResult], float | None]:
    """A figure of the cell's host load (interference, engine/hostload.py); None where it was not sampled."""
    return lambda cell: None if cell.host is None else getattr(cell.host, name)


_GOODPUT = DeltaCheck("goodput")
_LATENCY_P99 = DeltaCheck("latency_p99")  # a p99 is null under 100 requests (records.MIN_P99_REQUESTS)
_TTFT = ReportColumn("TTFT p50/p99 ms", ".0f")
_TPOT = ReportColumn("TPOT p50/p99 ms", ".1f")
_ITL = ReportColumn("ITL p50/p99 ms", ".1f")  # chunk gaps
_E2E = ReportColumn("E2E p50/p99 ms", ".0f")

CATALOGUE: tuple[Metric, ...] = (
    Metric("decode_tok_s", "decode_tok_s_median", True, "tok/s", "decode tok/s", ".1f", _field("decode_tok_s_median"),
           judged=True, check=DeltaCheck("decode_tok_s"), trend="decode", request=attrgetter("decode_tok_s"),
           batched="aggregate_tok_s"),
    Metric("aggregate_tok_s", "aggregate_tok_s", True, "tok/s", "aggregate tok/s", ".1f", _field("aggregate_tok_s"),
           judged=True),
    Metric("ttft", "ttft_s_median", False, "s", "TTFT s", ".3f", _field("ttft_s_median"), judged=True,
           check=DeltaCheck("ttft_s", in_run=False), request=attrgetter("ttft_s")),
    Metric("tpot", "tpot_ms_median", False, "ms", "TPOT ms", ".2f", _field("tpot_ms_median"), judged=True,
           request=attrgetter("tpot_ms")),
    Metric("ttft_ms_p50", "ttft_ms_p50", False, "ms", "TTFT p50 ms", ".1f", _field("ttft_ms_p50"), report=_TTFT),
    Metric("ttft_ms_p99", "ttft_ms_p99", False, "ms", "TTFT p99 ms", ".1f", _field("ttft_ms_p99"), judged=True,
           check=_LATENCY_P99, report=_TTFT),
    Metric("tpot_ms_p50", "tpot_ms_p50", False, "ms", "TPOT p50 ms", ".2f", _field("tpot_ms_p50"), report=_TPOT),
    Metric("tpot_ms_p99", "tpot_ms_p99", False, "ms", "TPOT p99 ms", ".2f", _field("tpot_ms_p99"), judged=True,
           check=_LATENCY_P99, report=_TPOT),
    Metric("itl_ms_p50", "itl_ms_p50", False, "ms", "ITL p50 ms", ".2f", _field("itl_ms_p50"), report=_ITL),
    Metric("itl_ms_p99", "itl_ms_p99", False, "ms", "ITL p99 ms", ".2f", _field("itl_ms_p99"), judged=True,
           check=_LATENCY_P99, report=_ITL),
    Metric("e2e_ms_p50", "e2e_ms_p50", False, "ms", "E2E p50 ms", ".0f", _field("e2e_ms_p50"), report=_E2E),
    Metric("e2e_ms_p99", "e2e_ms_p99", False, "ms", "E2E p99 ms", ".0f", _field("e2e_ms_p99"), judged=True,
           check=_LATENCY_P99, report=_E2E),
    # requests within every SLO, as a share of all the cell's requests and as their tokens over wall time
    Metric("goodput_share", "goodput_share", True, "ratio", "goodput share", ".3f", _field("goodput_share"),
           judged=True, check=_GOODPUT, report=ReportColumn("goodput share", ".0%")),
    Metric("goodput_tok_s", "goodput_tok_s", True, "tok/s", "goodput tok/s", ".1f", _field("goodput_tok_s"),
           judged=True, check=_GOODPUT, report=ReportColumn("goodput tok/s", ".1f")),
    Metric("mean_acceptance_length", "mean_acceptance_length", True, "tokens", "mean acceptance length", ".2f",
           lambda c: c.window.mean_acceptance_length, check=DeltaCheck("acceptance_length"), acceptance=True,
           trend="acceptance"),
    Metric("kv_cache_usage_peak", "kv_cache_usage_peak", True, "ratio", "KV-cache usage peak", ".3f",
           _field("kv_cache_usage_peak"), report=ReportColumn("KV peak", ".0%")),
    # Interference over the cell's window: the conditions of a measurement, never judged (a contaminated
    # cell's launch is run again instead: thresholds.host_*).
    Metric("host_foreign_cpu", "host_foreign_cpu", False, "ratio", "foreign CPU share", ".3f",
           _host("foreign_cpu")),
    Metric("host_steal", "host_steal", False, "ratio", "CPU steal share", ".3f", _host("steal")),
    Metric("host_cpu_pressure", "host_cpu_pressure", False, "ratio", "CPU pressure (PSI some)", ".3f",
           _host("cpu_pressure")),
    Metric("gpu_foreign_memory_mib", "gpu_foreign_memory_mib", False, "MiB", "foreign GPU memory", ".0f",
           _host("gpu_foreign_memory_mib")),
    Metric("gpu_sm_clock_ratio", "gpu_sm_clock_ratio", True, "ratio", "SM clock / max", ".3f",
           _host("gpu_sm_clock_ratio")),
)

METRICS: dict[str, Metric] = {m.name: m for m in CATALOGUE if m.judged}


def judged_at(metric: Metric, concurrency: int | None) -> Metric:
    """The metric a cell at `concurrency` (None: an open-loop cell) is judged on for `metric`."""
    if metric.batched is None or concurrency is None or concurrency < BATCHED_CONCURRENCY:
        return metric
    return METRICS[metric.batched]


# The functions below read CATALOGUE when called, not when defined, so a metric registered on a copy
# of it (a test's) is seen everywhere.


def cell_values(cell: CellResult) -> dict[str, float]:
    """The cell's figure of every catalogue metric it has, by stored name (`cell_metrics` rows); a looping
    cell's acceptance figures are no measurement of the drafter, so they are left out."""
    return {m.column: value for m in CATALOGUE
            if not (m.acceptance and cell.loop_detected) and (value := m.value(cell)) is not None}


def parameter_rows() -> list[dict[str, Any]]:
    """The delta-checked metrics as rows for the `$catalogue` parameter of sql/checks/*_deltas.sql."""
    return [{"metric": m.column, "lower": not m.higher_is_better, "family": m.check.family,
             "in_run": m.check.in_run, "acceptance": m.acceptance}
            for m in CATALOGUE if m.check is not None]


def check_label(column: str) -> tuple[str, str]:
    """(label, format) of a delta-checked metric's detail line; an unknown one is shown by name."""
    return next(((m.label, m.fmt) for m in CATALOGUE if m.column == column), (column, ".4g"))


def trends() -> list[Metric]:
    """The metrics `specwatch history` follows, the headline first."""
    return [m for m in CATALOGUE if m.trend is not None]


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
