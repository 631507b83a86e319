"""The report's view by prompt class: per arm and class, acceptance (mean length and per position)
over the cells that did not loop, how many cells still loop before EOS, and the share of tokens
written after the first EOS. Acceptance differs by class in either direction (code above prose on
the public models, prose above code on SmolLM2, issue 21): the rows state it, they assume none.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from specwatch.analysis.acceptance import pooled_positions
from specwatch.records import CellResult, RunResult
from specwatch.spec import ExperimentSpec


@dataclass(frozen=True)
class ClassRow:
    arm: str
    prompt_class: str
    cells: int
    looped: int  # cells whose output loops before its first EOS
    mean_acceptance_length: float | None  # pooled over the cells that did not loop; None without speculation
    per_position: list[float]
    repetition_ratio: float | None  # median over cells of the pre-EOS median
    eos_tail_share: float | None  # tokens from the first EOS on, over all tokens of the judged requests


def looped(cell: CellResult, flag_ratio: float) -> bool:
    """The gate's rule (bench/gates.py) on an A/B cell; a sweep cell's own detector."""
    rep = cell.repetition_ratio_median
    return bool(cell.loop_detected) or (rep is not None and rep > flag_ratio)


def _row(arm: str, prompt_class: str, cells: list[CellResult], flag_ratio: float) -> ClassRow:
    clean = [c.window for c in cells if not looped(c, flag_ratio) and c.window.num_drafts]
    drafts = sum(w.num_drafts or 0.0 for w in clean)
    accepted = sum(w.num_accepted_tokens or 0.0 for w in clean)
    judged = [r for c in cells for r in c.requests
              if r.status == "ok" and r.pre_eos_tokens is not None and r.completion_tokens]
    total = sum(r.completion_tokens or 0 for r in judged)
    ratios = [rep for c in cells if (rep := c.repetition_ratio_median) is not None]
    return ClassRow(
        arm=arm, prompt_class=prompt_class, cells=len(cells), looped=sum(looped(c, flag_ratio) for c in cells),
        mean_acceptance_length=1.0 + accepted / drafts if drafts else None,
        per_position=pooled_positions(clean),
        repetition_ratio=median(ratios) if ratios else None,
        eos_tail_share=(total - sum(r.pre_eos_tokens or 0 for r in judged)) / total if total else None,
    )


def class_rows(result: RunResult, spec: ExperimentSpec) -> list[ClassRow]:
    """Per arm (in the file's order) and class (the workload's order), over the arm's accepted cells."""
    rows = []
    for arm in spec.arms:
        for prompt_class in spec.workload.classes:
            cells = [c for a in result.arms if a.name == arm.name for c in a.cells
                     if c.prompt_class == prompt_class and not c.rejected and not c.skip_reason]
            if cells:
                rows.append(_row(arm.name, prompt_class, cells, spec.workload.repetition_flag_ratio))
    return rows


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else f"{value:{spec}}"


def _versus(row: ClassRow, first: ClassRow) -> str:
    """This class's mean acceptance length against the arm's first class: sign and size, as measured."""
    if row is first or row.mean_acceptance_length is None or first.mean_acceptance_length is None:
        return "-"
    delta = row.mean_acceptance_length - first.mean_acceptance_length
    return f"{delta:+.2f} ({delta / first.mean_acceptance_length:+.0%})"


def class_section(result: RunResult, spec: ExperimentSpec) -> list[str]:
    """The markdown lines: a table, then which classes still loop and how long the EOS tail is."""
    rows = class_rows(result, spec)
    if not rows:
        return []
    lines = ["", "By prompt class (acceptance pooled over the cells that did not loop; loops and repetition judged "
             "on the output before its first EOS; tail: the share of tokens from the first EOS on, written only "
             "because requests ignore EOS):", "",
             "| arm | class | cells | mean acc. len | vs first class | per position | loop cells | "
             "repetition (pre-EOS) | EOS tail |", "|---|---|---|---|---|---|---|---|---|"]
    firsts: dict[str, ClassRow] = {}
    for r in rows:
        first = firsts.setdefault(r.arm, r)
        lines.append(f"| {r.arm} | {r.prompt_class} | {r.cells} | {_fmt(r.mean_acceptance_length, '.2f')} | "
                     f"{_versus(r, first)} | {' '.join(f'{p:.2f}' for p in r.per_position) or '-'} | "
                     f"{r.looped} of {r.cells} | {_fmt(r.repetition_ratio, '.2f')} | "
                     f"{_fmt(r.eos_tail_share, '.0%')} |")
    loops = [f"`{r.arm}` {r.prompt_class} ({r.looped} of {r.cells})" for r in rows if r.looped]
    lines += ["", "Classes that still loop before EOS: " + (", ".join(loops) if loops else "none") + "."]
    return lines
