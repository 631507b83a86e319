"""The run's verdict table and markdown report (run dir + Prefect artifacts)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from prefect import task

from specwatch.records import ArmResult, CellResult, RunResult

REPORT_FILE = "report.md"


@dataclass(frozen=True)
class VerdictRow:
    arm: str
    k: int | None
    concurrency: int
    prompt_class: str
    decode_tok_s: float | None
    delta_pct: float | None
    ttft_s: float | None
    mean_acceptance_length: float | None
    acceptance_per_position: str
    verdict: str


def _classify(delta: float | None, band: float) -> str:
    if delta is None:
        return "n/a"
    if delta > band:
        return "gain"
    if delta < -band:
        return "regression"
    return "flat"


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def verdict_rows(result: RunResult, baseline: str, band: float) -> list[VerdictRow]:
    base_cells = {
        (c.concurrency, c.prompt_class): c
        for a in result.arms if a.name == baseline for c in a.cells if not c.rejected
    }
    invalid = {(q.arm, q.concurrency, q.prompt_class) for q in result.quality
               if q.severity == "invalid" and not q.passed}
    rows = []
    for arm in result.arms:
        for cell in arm.cells:
            base = base_cells.get((cell.concurrency, cell.prompt_class))
            delta = None
            if arm.name != baseline and base and base.decode_tok_s_median and cell.decode_tok_s_median:
                delta = cell.decode_tok_s_median / base.decode_tok_s_median - 1
            if cell.rejected:
                verdict = "rejected"
            elif (arm.name, cell.concurrency, cell.prompt_class) in invalid:
                verdict = "invalid"
            elif arm.name == baseline:
                verdict = "baseline"
            else:
                verdict = _classify(delta, band)
            rows.append(VerdictRow(
                arm=arm.name, k=arm.k, concurrency=cell.concurrency, prompt_class=cell.prompt_class,
                decode_tok_s=cell.decode_tok_s_median, delta_pct=None if delta is None else delta * 100,
                ttft_s=cell.ttft_s_median, mean_acceptance_length=cell.window.mean_acceptance_length,
                acceptance_per_position=" ".join(f"{p:.2f}" for p in cell.window.acceptance_per_position or []),
                verdict=verdict,
            ))
    return rows


def headline(result: RunResult) -> str:
    code = result.exit_code()
    return {
        0: "no regression flagged",
        3: "REGRESSION flagged",
        4: "incomplete: an arm failed or cells were rejected",
    }[code]


def _arm_line(arm: ArmResult) -> str:
    img = arm.image_ref
    version = f"{img.package} {img.vllm_version}" if img and img.vllm_version else arm.image
    digest = f" digest {img.digest[:12]}" if img and img.digest else ""
    launch = arm.launch
    k_conf = f", k confirmed {launch.k_confirmed} ({launch.k_source})" if launch and launch.k_confirmed else ""
    boot = f", boot {launch.boot_s:.1f}s" if launch and launch.boot_s else ""
    reason = f": {arm.reason}" if arm.reason else ""
    return f"- **{arm.name}** (block {arm.block}): {version}{digest}, method {arm.method}, k {arm.k}{k_conf}{boot}; " \
           f"status **{arm.status}**{reason}"


def _cell_notes(arm: ArmResult, cell: CellResult) -> list[str]:
    notes = [f"- {arm.name} c={cell.concurrency} {cell.prompt_class}: rejected: {cell.reject_reason}"] \
        if cell.rejected else []
    notes += [f"- {arm.name} c={cell.concurrency} {cell.prompt_class}: {flag}" for flag in cell.flags]
    return notes


def render_markdown(result: RunResult, baseline: str, band: float) -> str:
    prov = result.provenance
    ckpt = result.checkpoint
    lines = [
        f"# specwatch run {result.run_id}: {result.experiment_name}",
        "",
        f"**Verdict: {headline(result)}** (baseline arm `{baseline}`, noise band ±{band:.0%})",
        "",
        "## Conditions",
        f"- specwatch {prov.specwatch_version}, host {prov.host.hostname}: {prov.host.cpu_model} "
        f"x{prov.host.cpu_count}, GPU {prov.host.gpu_model or 'none'}",
        f"- started {result.started_at:%Y-%m-%d %H:%M:%S %Z}, flow run {result.flow_run_id or '-'}",
    ]
    if ckpt:
        lines.append(f"- checkpoint {ckpt.path} (config sha256 {ckpt.config_sha256[:12]}, {ckpt.shards} shard(s), "
                     f"{', '.join(ckpt.architectures)})")
    wl = result.experiment.get("workload", {})
    lines += [
        f"- workload: classes {wl.get('prompt_classes')}, prompt {wl.get('prompt_tokens')} tokens, "
        f"max {wl.get('max_tokens')} tokens, concurrency {wl.get('concurrency')}, "
        f"{wl.get('requests_per_cell')} requests/cell, {wl.get('warmup_requests')} warm-up",
        f"- sampling: {result.experiment.get('sampling')}",
        "",
        "## Arms",
        *[_arm_line(a) for a in result.arms],
        "",
        "## Results",
        "| arm | k | c | class | decode tok/s (median) | Δ vs baseline | TTFT s | mean acc. len | per-position "
        "acceptance | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in verdict_rows(result, baseline, band):
        lines.append(
            f"| {r.arm} | {r.k if r.k is not None else 'off'} | {r.concurrency} | {r.prompt_class} | "
            f"{_fmt(r.decode_tok_s, '.1f')} | {_fmt(r.delta_pct, '+.1f')}{'%' if r.delta_pct is not None else ''} | "
            f"{_fmt(r.ttft_s, '.3f')} | {_fmt(r.mean_acceptance_length)} | {r.acceptance_per_position or '-'} | "
            f"{r.verdict} |"
        )
    failed = [q for q in result.quality if not q.passed]
    lines += ["", "## Quality checks",
              f"{len(result.quality) - len(failed)} of {len(result.quality)} checks passed."]
    lines += [f"- **{q.severity}** `{q.check}` {q.arm} c={q.concurrency} {q.prompt_class}: {q.detail}" for q in failed]
    notes = [n for a in result.arms for c in a.cells for n in _cell_notes(a, c)]
    notes += [f"- arm {a.name} {a.status}: {a.reason}" for a in result.arms if a.status != "ok"]
    if notes:
        lines += ["", "## Limitations", *notes]
    return "\n".join(lines) + "\n"


def write_report(result: RunResult, run_dir: Path, baseline: str, band: float) -> Path:
    path = run_dir / REPORT_FILE
    path.write_text(render_markdown(result, baseline, band))
    return path


@task(name="report")
def report_task(result: RunResult, run_dir: Path, baseline: str, band: float) -> Path:
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    path = write_report(result, run_dir, baseline, band)
    key = f"specwatch-{result.experiment_name}".lower().replace("_", "-").replace(".", "-")
    create_markdown_artifact(path.read_text(), key=key, description=f"specwatch report {result.run_id}")
    create_table_artifact([asdict(r) for r in verdict_rows(result, baseline, band)], key=f"{key}-table",
                          description=f"verdict table {result.run_id}")
    return path
