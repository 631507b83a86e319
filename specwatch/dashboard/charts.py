"""The dashboard's charts as Vega-Lite specs, made with altair; the page renders them with the vendored
vega-embed (nothing is fetched at view time)."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from specwatch.analysis.changepoints import change_points

WIDTH = 760


TREND = {"decode_tok_s_median": "decode tok/s (median of rounds)", "mean_acceptance_length": "mean acceptance length"}


def trend(points: pd.DataFrame) -> dict[str, Any]:
    """A series over time, one panel per metric: change points of the headline (decode tok/s) as dashed rules
    on every panel (does acceptance move with it?), the first-bad runs of alerts circled, runs whose checks
    flagged them (hints) as triangles. One layered chart faceted by metric: altair's cost is per chart."""
    frame = points.assign(started_at=points["started_at"].map(lambda t: pd.Timestamp(t).isoformat()), change="")
    values = frame["decode_tok_s_median"].astype(float).tolist()
    if all(v == v for v in values):  # a change point indexes every point: none where one lacks the metric
        for cp in change_points(values):
            frame.loc[frame.index[cp.index], "change"] = f"{cp.change:+.1%}"
    long = frame.melt(id_vars=["run_id", "started_at", "vllm_version", "regression_flagged", "alerts", "change"],
                      value_vars=list(TREND), var_name="metric", value_name="value")
    long["metric"] = long["metric"].map(TREND)
    base = alt.Chart().encode(x=alt.X("started_at:T", title=None))
    y = alt.Y("value:Q", title=None, scale=alt.Scale(zero=False))
    tooltip = ["run_id:N", "vllm_version:N", alt.Tooltip("value:Q", format=".3f"), "alerts:N", "change:N"]
    chart = alt.layer(
        base.mark_line(point=True).encode(y=y, tooltip=tooltip),
        base.transform_filter("datum.regression_flagged").mark_point(
            shape="triangle-down", color="#e08a00", size=80, filled=True).encode(y=y, tooltip=tooltip),
        base.transform_filter("datum.alerts").mark_point(color="#c0392b", size=220, strokeWidth=3).encode(
            y=y, tooltip=tooltip),
        base.transform_filter("datum.change").mark_rule(color="#c0392b", strokeDash=[6, 4]),
        base.transform_filter("datum.change").mark_text(align="left", dx=4, dy=4, color="#c0392b",
                                                        baseline="top").encode(text="change:N", y=alt.value(0)),
        data=long,
    ).properties(width=WIDTH, height=200).facet(row=alt.Row("metric:N", title=None)).resolve_scale(y="independent")
    return chart.to_dict(validate=False)


def compare(cells: pd.DataFrame) -> dict[str, Any]:
    """Candidate vs baseline per cell: the relative change with its interval, zero marked."""
    frame = cells.assign(cell_metric=cells["label"] + " · " + cells["metric"])
    base = alt.Chart().encode(y=alt.Y("cell_metric:N", title=None, sort=None))
    tooltip = ["candidate_arm:N", "cell:N", "metric:N", "outcome:N",
               alt.Tooltip("before_value:Q", format=".3f"), alt.Tooltip("after_value:Q", format=".3f"),
               alt.Tooltip("estimate:Q", format="+.1%"), alt.Tooltip("low:Q", format="+.1%"),
               alt.Tooltip("high:Q", format="+.1%")]
    bars = base.mark_rule(strokeWidth=3).encode(x=alt.X("low:Q", title="change vs baseline (interval)",
                                                        axis=alt.Axis(format="+%")), x2="high:Q",
                                                color=alt.Color("outcome:N"), tooltip=tooltip)
    dots = base.mark_point(filled=True, size=70, color="black").encode(x="estimate:Q", tooltip=tooltip)
    zero = alt.Chart().mark_rule(color="#888").encode(x=alt.datum(0))
    chart = alt.layer(zero, bars, dots, data=frame).properties(width=WIDTH - 160).facet(
        row=alt.Row("candidate_arm:N", title=None))
    return chart.properties(title="candidate vs baseline per cell").to_dict(validate=False)


def arms(cells: pd.DataFrame) -> dict[str, Any]:
    """A run without a decision (one arm, or undecided): each arm's decode tok/s per cell."""
    frame = cells.assign(cell=cells["concurrency"].map(lambda c: f"c={c}") + " " + cells["prompt_class"])
    chart = alt.Chart(frame).mark_bar().encode(
        y=alt.Y("cell:N", title=None), x=alt.X("decode_tok_s:Q", title="decode tok/s (median of rounds)"),
        color="arm:N", yOffset="arm:N", tooltip=["arm:N", "k:Q", "vllm_version:N", "rounds:Q",
                                                 alt.Tooltip("decode_tok_s:Q", format=".2f")])
    return chart.properties(width=WIDTH).to_dict(validate=False)
