"""The report's figures as PNG files (matplotlib, no display needed)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless hosts and CI have no display

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from specwatch.analysis.intervals import mean_ci  # noqa: E402
from specwatch.analysis.loops import LOOP_FLAG  # noqa: E402
from specwatch.analysis.sweep import SweepPoint  # noqa: E402
from specwatch.analysis.verdict import ArmCurve  # noqa: E402
from specwatch.records import RunResult  # noqa: E402

ACCEPTANCE_PNG = "acceptance_per_position.png"
DECODE_PNG = "decode_vs_concurrency.png"


def acceptance_plot(curves: list[ArmCurve], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for curve in curves:
        ax.plot(range(len(curve.per_position)), curve.per_position, marker="o", label=f"{curve.arm} (k={curve.k})")
    ax.set_xlabel("speculative position")
    ax.set_ylabel("acceptance (accepted at position / drafts)")
    ax.set_ylim(0, 1.05)
    ax.set_title("Per-position acceptance, pooled over rounds")
    return _save(fig, [ax], path)


def _save(fig: plt.Figure, axes: list[plt.Axes], path: Path) -> Path:
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def decode_plot(result: RunResult, arms: list[str], prompt_classes: Sequence[str], path: Path) -> Path:
    fig, axes = plt.subplots(1, len(prompt_classes), figsize=(5.2 * len(prompt_classes), 4.0), squeeze=False)
    for ax, pclass in zip(axes[0], prompt_classes, strict=True):
        for arm in arms:
            per_conc: dict[int, list[float]] = {}
            for launch in (a for a in result.arms if a.name == arm and a.status == "ok"):
                for cell in launch.cells:
                    # decode vs concurrency: closed-loop cells only (a rate cell has no concurrency)
                    if (cell.prompt_class == pclass and cell.concurrency and not cell.rejected
                            and cell.decode_tok_s_median):
                        per_conc.setdefault(cell.concurrency, []).append(cell.decode_tok_s_median)
            if not per_conc:
                continue
            concs = sorted(per_conc)
            stats = [mean_ci(per_conc[c]) for c in concs]
            ax.errorbar(concs, [s[0] for s in stats], yerr=[s[1] for s in stats], marker="o", capsize=4, label=arm)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel("decode tok/s per stream (round medians)")
        ax.set_title(f"{pclass}: mean of rounds, 95% CI")
    return _save(fig, list(axes[0]), path)


SWEEP_DECODE_PNG = "sweep_decode_vs_depth.png"
SWEEP_ACCEPTANCE_PNG = "sweep_acceptance_vs_depth.png"


def _sweep_plot(points: Sequence[SweepPoint], arms: Sequence[str], path: Path,
                value: Callable[[SweepPoint], float | None], ylabel: str, title: str, decode: bool) -> Path:
    """One line per arm over depth (log x). Points of cells with a looping run are hollow: on the decode
    plot joined by a dotted line (decode stays a measurement), on the acceptance plot never joined
    (a loop inflates acceptance, so it is no part of the trend)."""
    fig, ax = plt.subplots(figsize=(6.8, 4.2))
    for colour, arm in zip(plt.rcParams["axes.prop_cycle"].by_key()["color"], arms, strict=False):
        shown = sorted(((p, v) for p in points if p.arm == arm and (v := value(p)) is not None),
                       key=lambda pv: pv[0].depth)
        # On the decode plot a loop is only what the output did (a no-spec arm loops too); on the
        # acceptance plot it is why the point is out of the trend.
        looped_label = f"{arm}: output looped" if decode else f"{arm}: {LOOP_FLAG}"
        for looped, style, label in ((False, "-", arm), (True, ":" if decode else "none", looped_label)):
            group = [(p, v) for p, v in shown if p.looped == looped]
            if group:
                ax.errorbar([p.depth for p, _ in group], [v for _, v in group],
                            yerr=[p.decode_ci for p, _ in group] if decode else None, marker="o", markersize=7,
                            capsize=4, color=colour, linestyle=style, label=label,
                            markerfacecolor="none" if looped else colour)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1024:g}K" if x >= 1024 else f"{x:g}"))
    ax.set_xlabel("context depth (prompt tokens)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return _save(fig, [ax], path)


def sweep_decode_plot(points: Sequence[SweepPoint], arms: Sequence[str], path: Path) -> Path:
    return _sweep_plot(points, arms, path, lambda p: p.decode_tok_s, "decode tok/s, single stream",
                       "Decode tok/s vs depth (mean, 95% CI; hollow: looped)", decode=True)


def sweep_acceptance_plot(points: Sequence[SweepPoint], arms: Sequence[str], path: Path) -> Path:
    return _sweep_plot(points, arms, path, lambda p: p.acceptance_shown, "mean acceptance length (incl. bonus)",
                       "Mean acceptance length vs depth (hollow: looped)", decode=False)
