"""Quality checks over one ingested run: sanity (is a cell believable?) and regression (is an
arm worse than the baseline beyond the noise band?).

DuckDB shapes the data (sql/checks/*.sql), Great Expectations judges it through its pandas
source (its SQL source cannot read DuckDB, see STACK_NOTES). Each suite runs once over a frame
with a `row_id` column; failing row ids come back from `unexpected_index_list`, so every
(cell, check, metric) gets its own record, passing ones included.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import duckdb
import pandas as pd

from specwatch.analysis.metrics import check_label, parameter_rows
from specwatch.analysis.sweep import points_from, steps
from specwatch.records import CellKey, QualityRecord
from specwatch.spec import Thresholds
from specwatch.store.db import load_sql, query_df

if TYPE_CHECKING:
    from great_expectations.data_context import AbstractDataContext

log = logging.getLogger("specwatch.quality")

# Per-position acceptance comes from float counter ratios; allow rounding noise, not a real rise.
RISE_EPSILON = 1e-9

_ROW_ID = "row_id"
_DELTA = "delta_pct"


@dataclass(frozen=True)
class Bound:
    """One sanity bound on one column of the sanity frame; `metric` is that column's name.

    A bound given as a str is the name of an expectation parameter, resolved at run time.
    Nulls pass (no speculation, no prefix-cache counter) unless `not_null`.
    """

    check: str
    metric: str
    label: str
    min_value: float | str | None = None
    max_value: float | str | None = None
    strict_max: bool = False
    not_null: bool = False


SANITY_BOUNDS: tuple[Bound, ...] = (
    Bound("sanity.acceptance_range", "draft_acceptance_rate", "draft acceptance rate", 0.0, 1.0),
    # min >= 0 and max <= 1 together put every position in [0, 1]
    Bound("sanity.acceptance_range", "acceptance_pos_min", "lowest per-position acceptance", min_value=0.0),
    Bound("sanity.acceptance_range", "acceptance_pos_max", "highest per-position acceptance", max_value=1.0),
    Bound(
        "sanity.positions_non_increasing",
        "acceptance_pos_max_rise",
        "largest per-position acceptance rise",
        max_value=RISE_EPSILON,
    ),
    # a null count would hide failures, so it fails too
    Bound("sanity.no_failed_requests", "requests_failed", "failed requests", 0.0, 0.0, not_null=True),
    Bound(
        "sanity.prefix_cache",
        "prefix_cache_hit_rate",
        "prefix cache hit rate",
        max_value="max_prefix_cache_hit_rate",
        strict_max=True,
    ),
)

# ---------------------------------------------------------------------------- public API


def run_checks(
    con: duckdb.DuckDBPyConnection, run_id: str, baseline_arm: str, thresholds: Thresholds,
    regression_checks: bool = True,
) -> list[QualityRecord]:
    """Sanity records for every cell of the run, then regression records for every non-baseline arm.

    `regression_checks=False` when the run has several rounds: the confidence intervals over rounds
    (tasks.verdict) then replace the single-boot band check.
    """
    sanity = sanity_frame(con, run_id)
    if sanity.empty:
        log.warning("run %s has no cells: no quality checks ran", run_id)
        return []
    regression = regression_frame(con, run_id, baseline_arm) if regression_checks else pd.DataFrame()
    params = expectation_parameters(thresholds)
    ctx = _gx_context()
    sanity_failed = _validate(ctx, "sanity", sanity, _sanity_expectations(), params)
    if not regression_checks:
        log.info("run %s: regression judged by the verdict over rounds, not by the single-launch band", run_id)
        regression_failed: dict[str, set[int]] = {}
    elif regression.empty:
        # one arm, a baseline without usable cells, or nothing matched: GE on an empty frame
        # would only report vacuous passes
        log.info("run %s: no cells comparable with baseline %r; regression checks skipped", run_id, baseline_arm)
        regression_failed = {}
    else:
        regression_failed = _validate(ctx, "regression", regression, _regression_expectations(), params)
    return sanity_records(sanity, sanity_failed, thresholds) + regression_records(
        regression, regression_failed.get(_DELTA, set()), thresholds
    )


def sanity_frame(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    return query_df(con, load_sql("checks/sanity_cells.sql"), {"run_id": run_id})


def regression_frame(con: duckdb.DuckDBPyConnection, run_id: str, baseline_arm: str) -> pd.DataFrame:
    return query_df(con, load_sql("checks/regression_deltas.sql"),
                    {"run_id": run_id, "baseline_arm": baseline_arm, "catalogue": parameter_rows()})


def expectation_parameters(thresholds: Thresholds) -> dict[str, float]:
    # delta_pct is value/baseline - 1, so "more than the band below baseline" is delta < -band
    return {
        "regression_floor": -thresholds.noise_band,
        "max_prefix_cache_hit_rate": thresholds.max_prefix_cache_hit_rate,
    }


# ---------------------------------------------------------------------------- Great Expectations


def _param(bound: float | str | None) -> float | dict[str, str] | None:
    return {"$PARAMETER": bound} if isinstance(bound, str) else bound


def _sanity_expectations() -> list[Any]:
    import great_expectations.expectations as gxe  # ~2.5 s import: only when checks run

    out: list[Any] = []
    for b in SANITY_BOUNDS:
        out.append(
            gxe.ExpectColumnValuesToBeBetween(
                column=b.metric,
                min_value=_param(b.min_value),
                max_value=_param(b.max_value),
                strict_max=b.strict_max,
            )
        )
        if b.not_null:
            out.append(gxe.ExpectColumnValuesToNotBeNull(column=b.metric))
    return out


def _regression_expectations() -> list[Any]:
    import great_expectations.expectations as gxe

    return [gxe.ExpectColumnValuesToBeBetween(column=_DELTA, min_value={"$PARAMETER": "regression_floor"})]


def _gx_context() -> AbstractDataContext:
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    # In memory, no data-docs site (the default ephemeral config logs a temp dir per call),
    # no progress bars in flow logs.
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        progress_bars=ProgressBarsConfig(globally=False),
        analytics_enabled=False,
    )
    ctx = gx.get_context(mode="ephemeral", project_config=config)
    ctx.data_sources.add_pandas("specwatch_quality")
    return ctx


def _validate(
    ctx: AbstractDataContext,
    name: str,
    frame: pd.DataFrame,
    expectations: list[Any],
    params: dict[str, float],
) -> dict[str, set[int]]:
    """Run one suite over `frame` once; returns the failing row ids per validated column.

    Per-expectation results are read instead of the overall `success`, which says only that
    something failed somewhere.
    """
    import great_expectations as gx

    source: Any = ctx.data_sources.get("specwatch_quality")  # the pandas source _gx_context added
    asset = source.add_dataframe_asset(name)
    batch = asset.add_batch_definition_whole_dataframe(name)
    suite = ctx.suites.add(gx.ExpectationSuite(name=name, expectations=expectations))
    definition = ctx.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch, suite=suite))
    result = definition.run(
        batch_parameters={"dataframe": frame},
        expectation_parameters=params,
        result_format={"result_format": "COMPLETE", "unexpected_index_column_names": [_ROW_ID]},
    )
    failed: dict[str, set[int]] = {}
    for r in result.results:
        assert r.expectation_config is not None  # every result of a suite run names its expectation
        column = r.expectation_config.kwargs["column"]
        if r.exception_info.get("raised_exception"):
            # an expectation that could not evaluate must not read as "passed"
            raise RuntimeError(f"quality suite {name!r}, column {column!r}: "
                               f"{r.exception_info.get('exception_message')}")
        rows = {int(u[_ROW_ID]) for u in r.result.get("unexpected_index_list") or []}
        if not r.success and not rows:
            raise RuntimeError(f"quality suite {name!r}, column {column!r} failed without naming rows: {r.result}")
        failed.setdefault(column, set()).update(rows)
    return failed


# ---------------------------------------------------------------------------- records


def _num(x: Any) -> float | None:
    if x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)):
        return None
    return float(x)


def _bound_text(b: Bound, thresholds: Thresholds) -> str:
    def val(v: float | str) -> str:
        return f"{getattr(thresholds, v) if isinstance(v, str) else v:g}"

    if b.min_value is not None and b.max_value is not None:
        if b.min_value == b.max_value:
            return f"== {val(b.min_value)}"
        return f"in [{val(b.min_value)}, {val(b.max_value)}]"
    if b.max_value is not None:
        return f"{'<' if b.strict_max else '<='} {val(b.max_value)}"
    assert b.min_value is not None
    return f">= {val(b.min_value)}"


def _bound_threshold(b: Bound, thresholds: Thresholds) -> float | None:
    """The limit a value is held against: the upper one when there is one (the side that trips in practice)."""
    v = b.max_value if b.max_value is not None else b.min_value
    return float(getattr(thresholds, v)) if isinstance(v, str) else v


def _sanity_detail(b: Bound, row: pd.Series, value: float | None, passed: bool, thresholds: Thresholds) -> str:
    expected = _bound_text(b, thresholds)
    if value is None:
        text = f"{b.label} not recorded" + (" (allowed)" if passed else f", expected {expected}")
    elif passed:
        text = f"{b.label} {value:.4g} (expected {expected})"
    else:
        text = f"{b.label} {value:.4g}, expected {expected}"
        at = _num(row.get("acceptance_pos_rise_at"))
        if b.metric == "acceptance_pos_max_rise" and at is not None:
            text += f" (at position {int(at)})"
    return text + (" [rejected cell]" if bool(row["rejected"]) else "")


def sanity_records(frame: pd.DataFrame, failed: dict[str, set[int]], thresholds: Thresholds) -> list[QualityRecord]:
    out = []
    for _, row in frame.iterrows():
        row_id = int(row[_ROW_ID])
        for b in SANITY_BOUNDS:
            value = _num(row[b.metric])
            passed = row_id not in failed.get(b.metric, set())
            out.append(
                QualityRecord(
                    **_cell_key(row),
                    check=b.check,
                    metric=b.metric,
                    value=value,
                    threshold=_bound_threshold(b, thresholds),
                    passed=passed,
                    severity="invalid",
                    detail=_sanity_detail(b, row, value, passed, thresholds),
                )
            )
    return out


def _cell_key(row: pd.Series) -> dict[str, Any]:
    """A check row's cell: the `cell` column (in-run and history checks carry it); a row without one
    names a closed-loop cell by its fields."""
    round_no = _num(row["round"])
    cell = row.get("cell")
    concurrency = _num(row["concurrency"])  # NULL for a rate cell
    if not isinstance(cell, str):
        cell = CellKey(concurrency=int(row["concurrency"]), prompt_class=row["prompt_class"],
                       prompt_tokens=int(row["prompt_tokens"])).id
    return {"arm": row["arm"], "round": None if round_no is None else int(round_no), "cell": cell,
            "concurrency": None if concurrency is None else int(concurrency), "prompt_class": row["prompt_class"]}


def _regression_detail(metric: str, position: float | None, value: float, baseline: float, delta: float,
                       band: float, where: str = "baseline") -> str:
    if position is not None:
        label, fmt = f"acceptance at position {int(position)}", ".3f"
    else:
        label, fmt = check_label(metric)
    # delta is oriented so that negative is worse (TTFT: baseline / value - 1)
    return f"{label} {value:{fmt}} vs {where} {baseline:{fmt}} ({delta * 100:+.1f}%, band {band * 100:g}%)"


def regression_records(frame: pd.DataFrame, failed: set[int], thresholds: Thresholds) -> list[QualityRecord]:
    band = thresholds.noise_band
    out = []
    for _, row in frame.iterrows():
        # the SQL keeps only rows with both sides present, so these are never None
        value, baseline = float(row["value"]), float(row["baseline_value"])
        out.append(
            QualityRecord(
                **_cell_key(row),
                check=row["check_name"],
                metric=row["metric"],
                value=value,
                baseline_value=baseline,
                threshold=band,
                passed=int(row[_ROW_ID]) not in failed,
                severity="regression",
                detail=_regression_detail(row["metric"], _num(row["position"]), value, baseline,
                                          float(row[_DELTA]), band, _baseline_label(row)),
            )
        )
    return out


def _baseline_label(row: pd.Series) -> str:
    """History rows name the run they are compared with; in-run rows compare with the baseline arm."""
    run = row.get("baseline_run")
    return "baseline" if run is None or (isinstance(run, float) and math.isnan(run)) else \
        f"{row['kind']} baseline run {run}"


HISTORY_POLICIES = ("auto", "previous-image", "same-image", "run")


def history_records(
    con: duckdb.DuckDBPyConnection, run_id: str, thresholds: Thresholds, policy: str = "auto",
    baseline_run: str | None = None,
) -> tuple[list[QualityRecord], list[str]]:
    """This run's points against their baselines from history (same series only).

    Returns the records and one note per point that has no baseline (the first run of a
    series says so instead of passing silently).
    """
    if policy not in HISTORY_POLICIES or (policy == "run") != (baseline_run is not None):
        raise ValueError(f"baseline policy {policy!r}: use one of {HISTORY_POLICIES}; 'run' needs a baseline run id")
    frame = query_df(con, load_sql("checks/history_deltas.sql"),
                     {"run_id": run_id, "policy": policy, "baseline_run": baseline_run or "",
                      "catalogue": parameter_rows()})
    points = query_df(con, load_sql("checks/history_points.sql"), {"run_id": run_id})
    covered = set(zip(frame["arm"], frame["cell"], strict=True))
    notes = [f"{r.arm} {r.cell}: no baseline in history ({policy}); first run of its series?"
             for r in points.itertuples() if (r.arm, r.cell) not in covered]
    if frame.empty:
        return [], notes
    failed = _validate(_gx_context(), "history", frame, _regression_expectations(), expectation_parameters(thresholds))
    return regression_records(frame, failed.get(_DELTA, set()), thresholds), notes


# ---------------------------------------------------------------------------- sweeps


def sweep_records(con: duckdb.DuckDBPyConnection, run_id: str, thresholds: Thresholds,
                  cliff_drop: float) -> list[QualityRecord]:
    """Between neighbouring depths of each arm: decode must not rise beyond the intervals by more than
    the noise band (`sweep.decode_falls`, invalid: deeper context cannot be faster), and must not drop
    by more than `cliff_drop` beyond them (`sweep.cliff`, a regression)."""
    import great_expectations.expectations as gxe

    pairs = steps(points_from(query_df(con, load_sql("checks/sweep_points.sql"), {"run_id": run_id})))
    if not pairs:
        log.info("run %s: fewer than two measured depths per arm; sweep checks skipped", run_id)
        return []
    frame = pd.DataFrame([{_ROW_ID: i, "min_rise": p.min_rise, "min_drop": p.min_drop} for i, p in enumerate(pairs)])
    failed = _validate(_gx_context(), "sweep", frame, [
        gxe.ExpectColumnValuesToBeBetween(column="min_rise", max_value={"$PARAMETER": "rise_ceiling"}),
        gxe.ExpectColumnValuesToBeBetween(column="min_drop", max_value={"$PARAMETER": "cliff_drop"}),
    ], {"rise_ceiling": thresholds.noise_band, "cliff_drop": cliff_drop})
    out = []
    for i, p in enumerate(pairs):
        s, d = p.shallow, p.deep
        between = (f"depth {s.depth} -> {d.depth}: decode {s.trend_decode_tok_s:.1f}±{s.trend_decode_ci:.1f} -> "
                   f"{d.trend_decode_tok_s:.1f}±{d.trend_decode_ci:.1f} tok/s ({-p.drop:+.1%})")
        for check, metric, value, limit, severity, text in (
            ("sweep.decode_falls", "min_rise", p.min_rise, thresholds.noise_band, "invalid",
             f"rises {p.min_rise:.1%} beyond the intervals, more than the noise band {thresholds.noise_band:.0%}"),
            ("sweep.cliff", "min_drop", p.min_drop, cliff_drop, "regression",
             f"CLIFF: drops {p.min_drop:.1%} beyond the intervals, more than cliff_drop {cliff_drop:.0%}"),
        ):
            passed = i not in failed.get(metric, set())
            out.append(QualityRecord(arm=p.arm, round=None, cell=d.cell, concurrency=1, prompt_class=None,
                                     check=check, metric=metric, value=value, threshold=limit, passed=passed,
                                     severity=severity, detail=between + ("" if passed else f"; {text}")))
    return out
