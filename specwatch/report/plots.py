"""The report's figures as PNG files (matplotlib, no display needed)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from statistics import mean

import matplotlib

matplotlib.use("Agg")  # headless hosts and CI have no display

import matplotlib.pyplot as plt  # noqa: E402
from scipy import stats as scistats  # noqa: E402

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
    ax.set_title("Per-position acceptance, pooled over blocks")
    return _save(fig, [ax], path)


def _save(fig: plt.Figure, axes: list[plt.Axes], path: Path) -> Path:
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean of block medians and the half-width of its 95% t-interval (0 with one block)."""
    m = mean(values)
    if len(values) < 2:
        return m, 0.0
    sd = (sum((v - m) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    return m, float(scistats.t.ppf(0.975, len(values) - 1)) * sd / math.sqrt(len(values))


def decode_plot(result: RunResult, arms: list[str], prompt_classes: Sequence[str], path: Path) -> Path:
    fig, axes = plt.subplots(1, len(prompt_classes), figsize=(5.2 * len(prompt_classes), 4.0), squeeze=False)
    for ax, pclass in zip(axes[0], prompt_classes, strict=True):
        for arm in arms:
            per_conc: dict[int, list[float]] = {}
            for block in (a for a in result.arms if a.name == arm and a.status == "ok"):
                for cell in block.cells:
                    # decode vs concurrency: closed-loop cells only (a rate cell has no concurrency)
                    if (cell.prompt_class == pclass and cell.concurrency and not cell.rejected
                            and cell.decode_tok_s_median):
                        per_conc.setdefault(cell.concurrency, []).append(cell.decode_tok_s_median)
            if not per_conc:
                continue
            concs = sorted(per_conc)
            stats = [_mean_ci(per_conc[c]) for c in concs]
            ax.errorbar(concs, [s[0] for s in stats], yerr=[s[1] for s in stats], marker="o", capsize=4, label=arm)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel("decode tok/s per stream (block medians)")
        ax.set_title(f"{pclass}: mean of blocks, 95% CI")
    return _save(fig, list(axes[0]), path)
