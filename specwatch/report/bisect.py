"""The culprit report of a bisect (`bisect.md` in its folder): the answer, the versions tested, each step's
outcome with its interval, launches and wall time, the error statement, and changelog links."""

from __future__ import annotations

import math
from pathlib import Path

from specwatch.bisect.record import BisectRecord, StepRecord


def write_bisect_report(record: BisectRecord, folder: Path) -> Path:
    """bisect.md and bisect.json (the record itself) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bisect.json").write_text(record.model_dump_json(indent=1))
    path = folder / "bisect.md"
    path.write_text(render(record))
    return path


def render(record: BisectRecord) -> str:
    tested = {name for s in record.steps for name in (s.older, s.newer)}
    lines = [f"# Bisect {record.bisect_id}: {record.name}", "",
             f"**{record.headline}**", "",
             f"Metric {record.metric} on {', '.join(record.cells)}; {len(record.images)} versions "
             f"{record.versions[0]} .. {record.versions[-1]}; {len(record.steps)} A/B(s), {record.launches} "
             f"launch(es), wall time {record.wall_s / 60:.1f} min.", "",
             f"Errors: {record.error_statement}.", ""]
    if record.culprits:
        lines += ["## Culprits (each confirmed by a fresh A/B against its predecessor)", ""]
        lines += [f"- {c}" for c in record.culprits] + [""]
    if record.notes:
        lines += ["## What stopped the narrowing", ""] + [f"- {n}" for n in record.notes] + [""]
    lines += ["## Steps", "",
              "| # | kind | baseline | candidate | decision | change [interval] | rounds | launches | wall min | run |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [_step_row(s) for s in record.steps]
    lines += ["", "Changes are the candidate against the baseline, + is better, with the step's repeated confidence "
              "interval at its deciding look (analysis/sequential.py).", "",
              "## Versions", "", "| image | version | tested | changelog |", "|---|---|---|---|"]
    for name, version, link in zip(record.images, record.versions, record.changelogs, strict=True):
        state = "skipped (did not build or boot)" if name in record.skipped else "yes" if name in tested else "no"
        lines.append(f"| {name} | {version} | {state} | {link or '-'} |")
    return "\n".join(lines) + "\n"


def _step_row(s: StepRecord) -> str:
    bounded = s.low is not None and s.high is not None and math.isfinite(s.low) and math.isfinite(s.high)
    change = "-" if s.estimate is None else f"{s.estimate:+.1%}" + (f" [{s.low:+.1%}, {s.high:+.1%}]" if bounded
                                                                    else " (no interval yet)")
    decision = s.outcome + (f" ({', '.join(s.failed_images)})" if s.failed_images else "")
    return (f"| {s.step} | {s.kind} | {s.older_version} | {s.newer_version} | {decision} | {change} | {s.rounds} | "
            f"{s.launches} | {s.wall_s / 60:.1f} | {s.run_id} |")
