"""The run's report in the five sections public A/B records use: Conditions, Measurement,
Result, Conclusion, Limitations. Markdown + PNG plots in the run dir, and Prefect artifacts.

Everything here is computed from a RunResult and its recorded spec, so `specwatch report`
regenerates the same report from DuckDB alone.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median

from prefect import task

from specwatch.records import RunResult
from specwatch.spec import ExperimentSpec, stored_spec
from tasks import plots
from tasks.verdict import Assessment, assess

REPORT_FILE = "report.md"


@dataclass(frozen=True)
class VerdictRow:
    arm: str
    k: int | None
    concurrency: int
    prompt_class: str
    blocks: int
    decode_tok_s: float | None  # median of the block medians
    delta_pct: float | None
    ci_pct: str
    ttft_s: float | None
    mean_acceptance_length: float | None
    verdict: str


def _band_outcome(delta: float | None, band: float) -> str:
    """Single boot: no interval exists, so the noise band alone classifies (marked as such)."""
    if delta is None:
        return "n/a"
    return "gain (1 boot)" if delta > band else "regression (1 boot)" if delta < -band else "flat (1 boot)"


def _med(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return median(present) if present else None


def verdict_rows(result: RunResult, spec: ExperimentSpec, assessment: Assessment) -> list[VerdictRow]:
    band = spec.thresholds.noise_band
    cis = {(c.arm, c.concurrency, c.prompt_class): c for c in assessment.cells}
    invalid = {(q.arm, q.concurrency, q.prompt_class) for q in result.quality
               if q.severity == "invalid" and not q.passed}
    decode_of: dict[tuple[str, int, str], float | None] = {}
    rows = []
    for arm in spec.arms:
        for conc in spec.workload.concurrency:
            for pclass in spec.workload.prompt_classes:
                cells = [c for a in result.arms if a.name == arm.name and a.status == "ok" for c in a.cells
                         if (c.concurrency, c.prompt_class) == (conc, pclass)]
                if not cells:
                    continue
                kept = [c for c in cells if not c.rejected]
                decode = _med([c.decode_tok_s_median for c in kept])
                decode_of[(arm.name, conc, pclass)] = decode
                base = decode_of.get((spec.baseline, conc, pclass))
                cv = cis.get((arm.name, conc, pclass))
                ci, delta, ci_text = cv.ci if cv else None, None, "-"
                if ci is not None and math.isfinite(ci.high):
                    delta, ci_text = ci.estimate, f"[{ci.low * 100:+.1f}, {ci.high * 100:+.1f}]"
                elif arm.name != spec.baseline and base and decode:
                    delta = decode / base - 1
                if not kept:
                    verdict = "rejected"
                elif (arm.name, conc, pclass) in invalid:
                    verdict = "invalid"
                elif arm.name == spec.baseline:
                    verdict = "baseline"
                elif cv is not None and cv.ci is not None and cv.ci.n_pairs >= 2:
                    verdict = cv.outcome
                else:
                    verdict = _band_outcome(delta, band)
                rows.append(VerdictRow(
                    arm=arm.name, k=next((a.k for a in result.arms if a.name == arm.name and a.status == "ok"), arm.k),
                    concurrency=conc, prompt_class=pclass, blocks=len(kept), decode_tok_s=decode,
                    delta_pct=None if delta is None else delta * 100, ci_pct=ci_text,
                    ttft_s=_med([c.ttft_s_median for c in kept]),
                    mean_acceptance_length=_med([c.window.mean_acceptance_length for c in kept]), verdict=verdict,
                ))
    return rows


def headline(result: RunResult, assessment: Assessment) -> str:
    status = {0: "", 3: "; a regression flagged", 4: "; incomplete: an arm failed or cells were rejected"}
    return f"{assessment.verdict.decision}{status[result.exit_code()]}"


def _fmt(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _conditions(result: RunResult, spec: ExperimentSpec) -> list[str]:
    prov, ckpt, wl, design = result.provenance, result.checkpoint, spec.workload, spec.design
    gpu = prov.host.gpu_model or "none"
    if prov.host.gpu_count:
        gpu += f" x{prov.host.gpu_count} (driver {prov.host.gpu_driver})"
    ended = f"{result.ended_at:%H:%M:%S %Z}" if result.ended_at else "-"
    lines = [
        "## Conditions",
        f"- host {prov.host.hostname}: {prov.host.cpu_model} x{prov.host.cpu_count}, GPU {gpu}",
        f"- specwatch {prov.specwatch_version}; run {result.run_id}, flow run {result.flow_run_id or '-'}; "
        f"started {result.started_at:%Y-%m-%d %H:%M:%S %Z}, ended {ended}",
    ]
    if ckpt:
        lines.append(f"- checkpoint `{ckpt.path}`: config sha256 `{ckpt.config_sha256[:16]}`, index sha256 "
                     f"`{(ckpt.index_sha256 or '-')[:16]}`, {ckpt.shards} shard(s), {', '.join(ckpt.architectures)}")
    images = {a.image_ref.name: a.image_ref for a in result.arms if a.image_ref}
    for ref in images.values():
        where = ref.url or f"{ref.package} {ref.vllm_version}"
        lines.append(f"- image `{ref.name}`: {where}, digest `{(ref.digest or '-')[:23]}`")
    seen = set()
    for arm in result.arms:
        if arm.name in seen or arm.launch is None:
            continue
        seen.add(arm.name)
        env = " ".join(f"{k}={v}" for k, v in arm.launch.env.items())
        lines.append(f"- arm `{arm.name}` launch: `{' '.join(arm.launch.argv) or arm.launch.base_url}`"
                     + (f" with env `{env}`" if env else ""))
    lines += [
        f"- workload: prompt classes {', '.join(wl.prompt_classes)}; {wl.prompt_tokens} prompt tokens, "
        f"{wl.max_tokens} output tokens (ignore_eos); concurrency {wl.concurrency}; "
        + (f"{wl.duration_s:g} s per cell" if wl.duration_s else f"{wl.requests_per_cell} requests per cell")
        + f"; {wl.warmup_requests} warm-up requests per launch; seed {wl.seed}",
        f"- sampling: {spec.sampling.model_dump()}",
        f"- design: {design.blocks} block(s) per arm{f' (adaptive up to {design.max_blocks})' if design.adaptive else ''}"
        f", counterbalanced order {' '.join(f'{a.name}#{a.block}' for a in result.arms)}; varies "
        f"{design.varies or 'inferred'}; {design.probes} greedy probe(s) of {design.probe_tokens} tokens per arm",
    ]
    return lines


def _measurement(result: RunResult, spec: ExperimentSpec) -> list[str]:
    launches = len(result.arms)
    cells = sum(len(a.cells) for a in result.arms)
    boots = [a.launch.boot_s for a in result.arms if a.launch and a.launch.boot_s]
    return [
        "## Measurement",
        f"{launches} server launch(es), {cells} cell(s); boot {_fmt(min(boots, default=None), '.0f')}-"
        f"{_fmt(max(boots, default=None), '.0f')} s. Every prompt starts with a nonce unique to the run, launch, cell "
        "and request; its length is calibrated with the server's /tokenize. Tokens are counted from "
        "`usage.completion_tokens`; decode tok/s per stream = (tokens - 1) / (last token - first token). "
        "Acceptance comes from /metrics counter deltas over each cell's window. A cell's replicate is its "
        "median over requests in one launch (block); blocks of the two arms are paired by launch order "
        f"and the relative difference gets a {('99' if spec.design.adaptive else '95')}% confidence interval over "
        "the pairs (BCa bootstrap on log ratios, never narrower than the paired t-interval).",
    ]


def _result(result: RunResult, spec: ExperimentSpec, assessment: Assessment, figures: list[str]) -> list[str]:
    lines = [
        "## Result",
        "| arm | k | c | class | blocks | decode tok/s | Δ vs baseline | CI % | TTFT s | mean acc. len | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in verdict_rows(result, spec, assessment):
        lines.append(
            f"| {r.arm} | {r.k if r.k is not None else 'off'} | {r.concurrency} | {r.prompt_class} | {r.blocks} | "
            f"{_fmt(r.decode_tok_s, '.1f')} | {_fmt(r.delta_pct, '+.1f', '%')} | {r.ci_pct} | "
            f"{_fmt(r.ttft_s, '.3f')} | {_fmt(r.mean_acceptance_length)} | {r.verdict} |"
        )
    if assessment.curves:
        lines += ["", "Per-position acceptance (pooled over blocks and cells):", "",
                  "| arm | k | per position | last | decay (last/first) | tail |", "|---|---|---|---|---|---|"]
        for c in assessment.curves:
            lines.append(f"| {c.arm} | {c.k} | {' '.join(f'{p:.2f}' for p in c.per_position)} | "
                         f"{c.per_position[-1]:.2f} | {_fmt(c.decay)} | "
                         f"{'COLLAPSED' if c.tail_collapsed else 'ok'} (floor {spec.verdict.tail_floor:g}) |")
    if assessment.cost:
        lines += ["", "Cost model (tokens per step from the acceptance curve, step time fitted over the arms' "
                  "c=lowest figures):", ""]
        for arm, pred in assessment.cost.items():
            best = pred.at(pred.best_k)
            table = ", ".join(f"k={r.k}: {r.decode_tok_s:.0f}{'*' if r.extrapolated else ''}" for r in pred.rows)
            lines.append(f"- from `{arm}` (k={pred.k_measured}): predicted decode tok/s {table} "
                         f"(* extrapolated); predicted best k = **{best.k}**")
        for row in assessment.cost_rows:
            lines.append(f"- agreement: `{row.arm}` k={row.k} measured {row.measured_tok_s:.1f} tok/s, predicted "
                         f"{row.predicted_tok_s:.1f} from the baseline's curve ({row.error * 100:+.1f}%)")
    lines += ["", *[f"![{name}]({name})" for name in figures]]
    return lines


def _conclusion(result: RunResult, assessment: Assessment) -> list[str]:
    v = assessment.verdict
    lines = ["## Conclusion", f"**{v.decision}**" + (" (exit code 3: a regression is flagged)"
                                                      if result.exit_code() == 3 else "")]
    lines += [f"- {reason}" for reason in v.reasons]
    checked = len(result.quality)
    failed = [q for q in result.quality if not q.passed]
    lines.append(f"- quality checks: {checked - len(failed)} of {checked} passed; greedy probes compared: "
                 f"{assessment.compared_probes}, diverging: {len(assessment.divergences)}")
    lines += [f"  - **{q.severity}** `{q.check}` {q.arm}"
              + (f" c={q.concurrency} {q.prompt_class}" if q.concurrency is not None else "") + f": {q.detail}"
              for q in failed]
    return lines


def _limitations(result: RunResult, spec: ExperimentSpec, assessment: Assessment) -> list[str]:
    notes = []
    for arm, diffs in spec.confounds().items():
        if spec.design.allow_confounded and len(diffs) > 1:
            notes.append(f"- CONFOUNDED: `{arm}` differs from the baseline in {', '.join(diffs)} "
                         "(allow_confounded: true); the result cannot be attributed to one change")
    for arm, n in assessment.blocks.items():
        if n < 3:
            notes.append(f"- `{arm}` has {n} completed block(s); fewer than 3 per arm leaves intervals wide or absent")
    for a in result.arms:
        if a.fallback_reason:
            notes.append(f"- `{a.name}` block {a.block} ran k={a.k} instead of k={a.k_requested}: {a.fallback_reason}")
        if a.status != "ok":
            notes.append(f"- `{a.name}` block {a.block} {a.status}: {a.reason}")
        for c in a.cells:
            if c.rejected:
                notes.append(f"- `{a.name}` block {a.block} c={c.concurrency} {c.prompt_class} rejected: "
                             f"{c.reject_reason}")
    for arm in spec.arms:
        if arm.speculative is None:
            continue  # repetition only matters where it can inflate acceptance
        cells = [c for a in result.arms if a.name == arm.name for c in a.cells]
        ratios = [c.repetition_ratio_median for c in cells if c.flags and c.repetition_ratio_median is not None]
        if ratios:
            notes.append(f"- `{arm.name}`: acceptance may be inflated by repetition in {len(ratios)} of {len(cells)} "
                         f"cell(s) (median repetition ratio {min(ratios):.2f}-{max(ratios):.2f})")
    return ["## Limitations", *(notes or ["- none recorded"])]


def render_markdown(result: RunResult, spec: ExperimentSpec, assessment: Assessment, figures: list[str]) -> str:
    lines = [f"# specwatch run {result.run_id}: {result.experiment_name}", "",
             f"**Verdict: {headline(result, assessment)}** (baseline arm `{spec.baseline}`, noise band "
             f"±{spec.thresholds.noise_band:.0%})", ""]
    for section in (_conditions(result, spec), _measurement(result, spec),
                    _result(result, spec, assessment, figures), _conclusion(result, assessment),
                    _limitations(result, spec, assessment)):
        lines += [*section, ""]
    return "\n".join(lines)


def write_report(result: RunResult, out_dir: Path) -> tuple[Path, Assessment]:
    """Report + plots into `out_dir`; returns the markdown path and the assessment behind it."""
    spec = stored_spec(result.experiment)
    assessment = assess(result, spec)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = []
    if assessment.curves:
        figures.append(plots.acceptance_plot(assessment.curves, out_dir / plots.ACCEPTANCE_PNG).name)
    if any(a.cells for a in result.arms):
        figures.append(plots.decode_plot(result, [a.name for a in spec.arms], spec.workload.prompt_classes,
                                         out_dir / plots.DECODE_PNG).name)
    path = out_dir / REPORT_FILE
    path.write_text(render_markdown(result, spec, assessment, figures))
    return path, assessment


@task(name="report")
def report_task(result: RunResult, run_dir: Path) -> Path:
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    path, assessment = write_report(result, run_dir)
    spec = stored_spec(result.experiment)
    key = f"specwatch-{result.experiment_name}".lower().replace("_", "-").replace(".", "-")
    create_markdown_artifact(path.read_text(), key=key, description=f"specwatch report {result.run_id}")
    rows = [{k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(r).items()}
            for r in verdict_rows(result, spec, assessment)]
    create_table_artifact(rows, key=f"{key}-table",
                          description=f"verdict table {result.run_id}: {assessment.verdict.decision}")
    return path
