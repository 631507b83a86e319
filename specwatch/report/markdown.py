"""The run's report in the five sections public A/B records use: Conditions, Measurement,
Result, Conclusion, Limitations. Markdown + PNG plots in the run dir, and Prefect artifacts.

Everything here is computed from a RunResult and its recorded spec, so `specwatch report`
regenerates the same report from DuckDB alone.
"""

from __future__ import annotations

from pathlib import Path
from statistics import median

from specwatch.analysis.metrics import Metric, report_columns
from specwatch.analysis.outputs import output_matches
from specwatch.analysis.verdict import Assessment
from specwatch.records import CellResult, RunResult
from specwatch.report import plots
from specwatch.report.classes import class_section
from specwatch.report.decision import decision_lines
from specwatch.report.interference import interference_lines
from specwatch.report.rows import VerdictRow, headline, metric_rows
from specwatch.spec import ExperimentSpec, WorkloadSpec
from specwatch.spec.workload import BATCHED_CONCURRENCY

REPORT_FILE = "report.md"


def _fmt(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _cell_size(wl: WorkloadSpec) -> str:
    if wl.duration_s:
        return f"{wl.duration_s:g} s per cell"
    waves = wl.batched_waves and max(wl.concurrency, default=0) >= BATCHED_CONCURRENCY
    return (f"{wl.requests_per_cell} requests per cell"
            + (f" (at least {wl.min_waves} x c)" if wl.min_waves > 1 else "")
            + (f"; at c>={BATCHED_CONCURRENCY} at least {wl.batched_waves} whole waves of c" if waves else ""))


def _conditions(result: RunResult, spec: ExperimentSpec) -> list[str]:
    prov, ckpt, wl, design = result.provenance, result.checkpoint, spec.workload, spec.design
    gpu = prov.host.gpu_model or "none"
    if prov.host.gpu_count:
        memory = f", {prov.host.gpu_memory_mib / 1024:.0f} GiB each" if prov.host.gpu_memory_mib else ""
        gpu += f" x{prov.host.gpu_count} (driver {prov.host.gpu_driver}{memory})"
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
        kv, seqs, util = arm.launch.kv_cache_tokens, arm.launch.max_num_seqs, arm.launch.gpu_memory_utilization
        lines.append(f"- arm `{arm.name}` launch: `{' '.join(arm.launch.argv) or arm.launch.base_url}`"
                     + (f" with env `{env}`" if env else "")
                     + (f"; KV cache {kv:,} tokens (from {arm.launch.kv_cache_source})" if kv else "")
                     + (f"; max_num_seqs {seqs}" if seqs else "")
                     + (f"; gpu_memory_utilization {util:g}" if util is not None else ""))
    lines += [
        f"- workload: prompt classes {', '.join(wl.classes)}; {wl.prompt_tokens} prompt tokens, "
        f"{wl.max_tokens} output tokens (ignore_eos); concurrency {wl.concurrency}; "
        + (f"request rates {wl.request_rates} req/s; " if wl.request_rates else "")
        + (f"ramp {wl.ramp_up.start_rps:g}-{wl.ramp_up.end_rps:g} req/s (linear); " if wl.ramp_up else "")
        + (f"{wl.arrival} arrivals (burstiness {wl.burstiness:g}); " if wl.request_rates or wl.ramp_up else "")
        + _cell_size(wl)
        + f"; {wl.warmup_requests} warm-up requests per launch; seed {wl.seed}",
        f"- sampling: {spec.sampling.model_dump()}",
        f"- design: {design.rounds} round(s)"
        f"{f', adaptive up to {design.max_rounds} while undecided' if design.adaptive else ''}"
        f", one-sided alpha {design.alpha:g} per call; counterbalanced order "
        f"{' '.join(f'{a.name}#{a.round}' for a in result.arms)}; varies "
        f"{design.varies or 'inferred'}; {design.probes} greedy probe(s) of {design.probe_tokens} tokens per arm",
        *interference_lines(result, spec.thresholds),
    ]
    return lines


def _measurement(result: RunResult, spec: ExperimentSpec) -> list[str]:
    launches = len(result.arms)
    cells = sum(len(a.cells) for a in result.arms)
    boots = [a.launch.boot_s for a in result.arms if a.launch and a.launch.boot_s]
    return [
        "## Measurement",
        f"{launches} server launch(es), {cells} cell(s); boot {_fmt(min(boots, default=None), '.0f')}-"
        f"{_fmt(max(boots, default=None), '.0f')} s. Every prompt starts with a nonce unique to the run, cell "
        "and request; every launch (each arm, each round) gets the same prompts in the same order, each on a "
        "fresh server (common random numbers), so the interval is over launches for this request set. A server "
        "that outlives its launch gets nonces per round, and per arm where arms share it. Prompt length "
        "is calibrated with the server's /tokenize. Tokens are counted from "
        "`usage.completion_tokens`; decode tok/s per stream = (tokens - 1) / (last token - first token). "
        "Acceptance comes from /metrics counter deltas over each cell's window. A round is one launch of each "
        "arm, and the unit of replication: per round and cell, the candidate's requests are paired with the "
        "baseline's by request index and summarised as their median log-ratio (the cell figures' log-ratio where "
        "requests do not pair; aggregate throughput at high concurrency). The decision is a group-sequential "
        "t-test over rounds (see the Conclusion).",
    ]


def _result(result: RunResult, spec: ExperimentSpec, assessment: Assessment, rows: list[VerdictRow],
            figures: list[str]) -> list[str]:
    lines = [
        "## Result",
        "Δ and CI per cell: the decision's interval at its last look (for a batched cell's decode tok/s, of "
        "aggregate throughput), in the metric's own direction.",
        "",
        "| arm | k | load | class | rounds | decode tok/s | Δ vs baseline | CI % | TTFT s | mean acc. len | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.arm} | {r.k if r.k is not None else 'off'} | {r.key.level} | {r.prompt_class} | {r.rounds} | "
            f"{_fmt(r.decode_tok_s, '.1f')} | {_fmt(r.delta_pct, '+.1f', '%')} | {r.ci_pct} | "
            f"{_fmt(r.ttft_s, '.3f')} | {_fmt(r.mean_acceptance_length)} | {r.verdict} |"
        )
    if spec.verdict.metrics != ["decode_tok_s"]:
        lines += ["", f"Per metric (`verdict.metrics`: {', '.join(spec.verdict.metrics)}; each judged with its "
                  "direction, Δ and CI in % of the baseline):", "",
                  "| arm | load | class | metric | better | baseline | candidate | Δ % [CI] | outcome |",
                  "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {m.arm} | {m.key.level} | {m.key.prompt_class} | {m.metric} | {m.better} | "
                  f"{_fmt(m.baseline, '.3f')} {m.unit} | {_fmt(m.value, '.3f')} {m.unit} | {m.ci_pct} | {m.outcome} |"
                  for m in metric_rows(result, spec, assessment)]
    if assessment.curves:
        lines += ["", "Per-position acceptance (pooled over rounds and cells):", "",
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
    lines += class_section(result, spec)
    lines += _latency(result)
    lines += _output_match(result, spec)
    lines += ["", *[f"![{name}]({name})" for name in figures]]
    return lines


def _median_of(cells: list[CellResult], metric: Metric) -> float | None:
    values = [v for c in cells if (v := metric.value(c)) is not None]
    return median(values) if values else None


def _latency(result: RunResult) -> list[str]:
    """The catalogue's report columns (latency percentiles, goodput, KV cache) per arm and cell, each a median
    over the arm's accepted rounds (p99 is '-' under 100 requests), then preemptions summed over rounds."""
    groups: dict[tuple[str, str], list[CellResult]] = {}
    for arm in result.arms:
        for c in arm.cells:
            if not c.rejected:
                groups.setdefault((arm.name, c.cell), []).append(c)
    if not groups:
        return []
    columns = report_columns()
    head = " | ".join(column.head for column, _ in columns)
    lines = ["", "Latency (medians over rounds; p99 needs >= 100 requests), goodput and KV cache:", "",
             f"| arm | cell | {head} | preemptions |",
             "|---|---|" + "---|" * (len(columns) + 1)]
    for (name, cell), cells in groups.items():
        figures = ["/".join(_fmt(_median_of(cells, m), column.fmt) for m in shown) for column, shown in columns]
        preempt = [c.window.preemptions for c in cells if c.window.preemptions is not None]
        lines.append(f"| {name} | {cell} | {' | '.join(figures)} | {_fmt(sum(preempt) if preempt else None, '.0f')} |")
    return lines


def _output_match(result: RunResult, spec: ExperimentSpec) -> list[str]:
    """Per arm and cell, how many same-prompt requests (pooled over rounds) gave the baseline's output."""
    matches = output_matches(result, spec.baseline)
    if not matches:
        return []
    return ["", "Outputs equal to the baseline's for the same prompt (sha256 of the text; requests paired by "
            "request id within a round). A mismatch is not a correctness failure: batched kernels, other images "
            "and CPU builds diverge under greedy decoding too; only the greedy probes judge correctness.", "",
            "| arm | cell | paired requests | same output |", "|---|---|---|---|",
            *[f"| {m.arm} | {m.cell} | {m.paired} | {m.matched} ({100 * m.matched / m.paired:.0f}%) |"
              for m in matches]]


def _conclusion(result: RunResult, spec: ExperimentSpec, assessment: Assessment) -> list[str]:
    v = assessment.verdict
    lines = ["## Conclusion", f"**{v.decision}**" + (" (exit code 3: a regression is flagged)"
                                                      if result.exit_code() == 3 else "")]
    lines += [f"- {reason}" for reason in v.reasons]
    for ad in assessment.arms:
        lines += decision_lines(ad, assessment.design, spec.baseline)
    checked = len(result.quality)
    failed = [q for q in result.quality if not q.passed]
    lines.append(f"- quality checks: {checked - len(failed)} of {checked} passed; greedy probes compared: "
                 f"{assessment.compared_probes}, diverging: {len(assessment.divergences)}")
    lines += [f"  - **{q.severity}** `{q.check}` {q.arm}"
              + (f" {q.cell}" if q.cell is not None else "") + f": {q.detail}"
              for q in failed]
    return lines


def _limitations(result: RunResult, spec: ExperimentSpec, assessment: Assessment) -> list[str]:
    notes = []
    for arm, diffs in spec.confounds().items():
        if spec.design.allow_confounded and len(diffs) > 1:
            notes.append(f"- CONFOUNDED: `{arm}` differs from the baseline in {', '.join(diffs)} "
                         "(allow_confounded: true); the result cannot be attributed to one change")
    for arm, n in assessment.rounds.items():
        if n < 3:
            notes.append(f"- `{arm}` has {n} completed round(s); fewer than 3 without a stored variance leaves no "
                         "interval")
    if result.redos:
        notes.append(f"- the host was busy during {len(result.redos)} launch(es) (Conditions): none of their figures "
                     "is read; each was measured again in its round while design.max_redos allowed")
    for a in result.arms:
        if a.fallback_reason:
            notes.append(f"- `{a.name}` round {a.round} ran k={a.k} instead of k={a.k_requested}: {a.fallback_reason}")
        if a.status != "ok":
            notes.append(f"- `{a.name}` round {a.round} {a.status}: {a.reason}")
        for c in a.cells:
            if c.rejected:
                notes.append(f"- `{a.name}` round {a.round} {c.key.label} rejected: "
                             f"{c.reject_reason}")
    for spec_arm in spec.arms:
        if spec_arm.speculative is None:
            continue  # repetition only matters where it can inflate acceptance
        cells = [c for a in result.arms if a.name == spec_arm.name for c in a.cells]
        ratios = [c.repetition_ratio_median for c in cells if c.flags and c.repetition_ratio_median is not None]
        if ratios:
            notes.append(f"- `{spec_arm.name}`: acceptance may be inflated by repetition in {len(ratios)} of "
                         f"{len(cells)} cell(s) (median repetition ratio {min(ratios):.2f}-{max(ratios):.2f})")
    return ["## Limitations", *(notes or ["- none recorded"])]


def render_markdown(result: RunResult, spec: ExperimentSpec, assessment: Assessment, rows: list[VerdictRow],
                    figures: list[str]) -> str:
    lines = [f"# specwatch run {result.run_id}: {result.experiment_name}", "",
             f"**Verdict: {headline(result, assessment)}** (baseline arm `{spec.baseline}`, noise band "
             f"±{spec.thresholds.noise_band:.0%})", ""]
    for section in (_conditions(result, spec), _measurement(result, spec),
                    _result(result, spec, assessment, rows, figures), _conclusion(result, spec, assessment),
                    _limitations(result, spec, assessment)):
        lines += [*section, ""]
    return "\n".join(lines)


def write_report(result: RunResult, spec: ExperimentSpec, assessment: Assessment, rows: list[VerdictRow],
                 out_dir: Path) -> Path:
    """Report + plots into `out_dir`; returns the markdown path. The verdict (`assessment`, its `rows`) is
    the caller's, computed once per run and shown the same here, in the CLI and in the flow's outcome."""
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = []
    if assessment.curves:
        figures.append(plots.acceptance_plot(assessment.curves, out_dir / plots.ACCEPTANCE_PNG).name)
    if any(a.cells for a in result.arms):
        figures.append(plots.decode_plot(result, [a.name for a in spec.arms], spec.workload.classes,
                                         out_dir / plots.DECODE_PNG).name)
    path = out_dir / REPORT_FILE
    path.write_text(render_markdown(result, spec, assessment, rows, figures))
    return path
