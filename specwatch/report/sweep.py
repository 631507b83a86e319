"""The sweep report: the figures table, the change per doubling, the cross-arm comparison, the
checks, and the two plots (decode tok/s and mean acceptance length vs depth)."""

from __future__ import annotations

from pathlib import Path

import duckdb

from specwatch.analysis.loops import LOOP_FLAG
from specwatch.analysis.sweep import SweepPoint, change_per_doubling, points_from
from specwatch.records import RunResult
from specwatch.report import plots
from specwatch.report.interference import interference_lines
from specwatch.resolve import stored_spec
from specwatch.store.db import load_sql, query_df

SWEEP_REPORT = "sweep.md"


def sweep_points(con: duckdb.DuckDBPyConnection, run_id: str) -> list[SweepPoint]:
    return points_from(query_df(con, load_sql("checks/sweep_points.sql"), {"run_id": run_id}))


def _n(value: float | None, fmt: str) -> str:
    return "-" if value is None else f"{value:{fmt}}"


def figures_table(points: list[SweepPoint]) -> list[str]:
    lines = ["| arm | depth | runs | decode tok/s (95% CI) | TTFT s | prefill tok/s | mean acceptance length | "
             "loop runs | gen. repetition | prompt repetition |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in points:
        if p.skip_reason:
            lines.append(f"| {p.arm} | {p.depth} | 0 | skipped: {p.skip_reason} | | | | | | |")
            continue
        acceptance = _n(p.mean_acceptance_length, ".2f")
        if p.mean_acceptance_length is None and p.looped_acceptance_length is not None:
            acceptance = f"({p.looped_acceptance_length:.2f}, {LOOP_FLAG})"
        decode = "-" if p.decode_tok_s is None else f"{p.decode_tok_s:.1f} ± {p.decode_ci:.1f}"
        lines.append(f"| {p.arm} | {p.depth} | {p.runs} | {decode} | {_n(p.ttft_s, '.3f')} | "
                     f"{_n(p.prefill_tok_s, '.0f')} | {acceptance} | {p.loop_runs} | {_n(p.repetition_ratio, '.2f')} | "
                     f"{_n(p.prompt_repetition_ratio, '.3f')} |")
    return lines


def comparison_table(points: list[SweepPoint], arms: list[str], baseline: str) -> list[str]:
    """Each other arm against the baseline arm at every depth both measured."""
    base = {p.depth: p for p in points if p.arm == baseline and p.decode_tok_s}
    lines = [f"| arm vs {baseline} | depth | decode tok/s | {baseline} decode tok/s | decode change | "
             f"mean acceptance length | {baseline} mean acceptance length |", "|---|---:|---:|---:|---:|---:|---:|"]
    for arm in arms:
        for p in (p for p in points if p.arm == arm and arm != baseline and p.decode_tok_s):
            b = base.get(p.depth)
            if b is None or not b.decode_tok_s or p.decode_tok_s is None:
                continue
            lines.append(f"| {arm} | {p.depth} | {p.decode_tok_s:.1f} | {b.decode_tok_s:.1f} | "
                         f"{p.decode_tok_s / b.decode_tok_s - 1:+.1%} | {_n(p.mean_acceptance_length, '.2f')} | "
                         f"{_n(b.mean_acceptance_length, '.2f')} |")
    return lines if len(lines) > 2 else ["(no depth measured by both an arm and the baseline)"]


def render(result: RunResult, points: list[SweepPoint], figures: list[str]) -> str:
    spec = stored_spec(result.experiment)
    arms = [a.name for a in spec.arms]
    lines = [f"# specwatch sweep {result.run_id}: {result.experiment_name}", "",
             f"Single stream, {spec.workload.max_tokens} output tokens, rounds per arm: {spec.design.rounds}. "
             "Decode: mean of round medians with its 95% t-interval (fewer than 3 rounds: of all runs). "
             "The depth checks and the per-doubling fit leave out a speculating arm's looping runs "
             "(a loop inflates decode as it inflates acceptance). Acceptance: runs that did not loop; "
             f"a looping run's figure is shown in brackets ({LOOP_FLAG}) and left out of trends.", "",
             "## Figures", *figures_table(points), "", "## Decode change per doubling of depth"]
    for arm in arms:
        change = change_per_doubling(points, arm)
        lines.append(f"- `{arm}`: " + ("fewer than two measured depths" if change is None else f"{change:+.1%}"))
    lines += ["", "## Across arms", *comparison_table(points, arms, spec.baseline), "", "## Checks"]
    checks = [q for q in result.quality if q.check.startswith("sweep.") or q.severity == "regression"]
    lines += [f"- {'ok' if q.passed else 'FAILED'} {q.check} `{q.arm}` {q.cell}: {q.detail}" for q in checks] \
        or ["- none ran (fewer than two measured depths)"]
    failed = [a for a in result.arms if a.status != "ok"]
    if failed:
        lines += ["", "## Launches that did not run"] + [f"- `{a.name}` round {a.round} {a.status}: {a.reason}"
                                                          for a in failed]
    lines += ["", "## Conditions: the host's other work", *interference_lines(result, spec.thresholds)]
    lines += ["", *[f"![{f}]({f})" for f in figures]]
    return "\n".join(lines) + "\n"


def write_sweep_report(result: RunResult, points: list[SweepPoint], out_dir: Path) -> Path:
    """sweep.md and the two plots in `out_dir`."""
    spec = stored_spec(result.experiment)
    arms = [a.name for a in spec.arms]
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = [plots.sweep_decode_plot(points, arms, out_dir / plots.SWEEP_DECODE_PNG).name,
               plots.sweep_acceptance_plot(points, arms, out_dir / plots.SWEEP_ACCEPTANCE_PNG).name]
    path = out_dir / SWEEP_REPORT
    path.write_text(render(result, points, figures))
    return path
