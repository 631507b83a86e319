"""`specwatch`: run, validate, ingest and query. Exit codes are part of the contract:
0 clean, 1 could not run, 3 regression flagged, 4 an arm failed or cells were rejected.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from cli.alerts import app as alerts_app
from cli.common import DbOption, err, out
from cli.common import existing_db as _existing_db
from cli.common import fail as _fail
from flows import prefect_env
from specwatch import paths
from specwatch.resolve import load_spec, resolve, workload_problems
from specwatch.spec import BisectSpec, ExperimentSpec, SamplingSpec, SpecError, WorkloadSpec

if TYPE_CHECKING:
    from flows.ab import RunOutcome
    from flows.calibrate import CalibrationOutcome
    from specwatch.plan import Plan
    from specwatch.report.rows import VerdictRow

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Track vLLM speculative-decoding performance: A/B runs, DuckDB history, regression checks.")

app.add_typer(alerts_app, name="alerts")


@app.callback()
def _setup() -> None:
    # Every command may import prefect (tasks/, flows/): its settings must be in place first.
    prefect_env.configure()


def _num(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _load(file: Path) -> ExperimentSpec:
    try:
        return load_spec(file)
    except SpecError as exc:
        raise _invalid(exc) from None


def _load_bisect(file: Path) -> BisectSpec:
    from specwatch.bisect.steps import resolve_bisect
    from specwatch.spec import parse_bisect

    try:
        return resolve_bisect(parse_bisect(file), source=str(file))
    except SpecError as exc:
        raise _invalid(exc) from None


def _bisect_plan(spec: BisectSpec, db: Path | None, power: bool) -> None:
    """What `specwatch bisect` would run: the versions in order, the one metric and cells, the error bound, and
    what one A/B (the endpoints') costs, built as the flow builds it; with `power`, the rounds it needs."""
    from specwatch.analysis.bisection import Pair, error_statement
    from specwatch.bisect.steps import max_steps, step_experiment, version_of
    from specwatch.plan import plan

    table = Table(title=f"bisect plan: {spec.name} ({len(spec.images)} versions, oldest first)")
    for col in ("#", "image", "version", "backend"):
        table.add_column(col, overflow="fold")
    for i, image in enumerate(spec.images):
        table.add_row(str(i), image.name, version_of(image), image.backend)
    out.print(table)
    most = max_steps(spec)
    ab = step_experiment(spec, Pair(0, len(spec.images) - 1, "endpoints"))
    p = plan(ab)  # adaptive: up to max_rounds
    out.print(f"metric {spec.metric} on {', '.join(spec.cells)}; the endpoints first, then at most {most} A/Bs in all",
              highlight=False)
    out.print(f"errors: {error_statement(spec.error, most)}", highlight=False)
    out.print(f"one A/B: up to {p.launches} launches ({p.rounds} rounds), ~{p.seconds / 60:.1f} min; {most} A/Bs at "
              f"most: up to ~{most * p.seconds / 3600:.1f} h (excluding first-time image builds, ~2 min each)",
              highlight=False)
    if power:  # each A/B at the step's alpha
        _power(ab, p, db)


def _power(spec: ExperimentSpec, p: Plan, db: Path | None) -> None:
    """The rounds a call needs, from the variance stored for these cells as the run would look it up."""
    from specwatch.plan import PLAN_POWER, planned_facts, rounds_plan
    from specwatch.store.priors import PriorError, priors_for

    facts, why = planned_facts(spec)
    try:
        priors = priors_for(db or paths.default_db(), spec, facts) if facts is not None else {}
    except PriorError as exc:
        raise _fail(str(exc)) from None
    if facts is None:
        out.print(f"stored variance: none looked up ({why}; its digest and hash key the variance)", highlight=False)
    for need in rounds_plan(spec, p, priors):
        out.print(f"power: a +-{need.effect:.0%} change at {need.level} is called in its direction with "
                  f"{PLAN_POWER:.0%} power after "
                  + (f"{need.rounds} round(s), about {need.minutes:.0f} min" if need.rounds is not None
                     else "more than 10,000 rounds: not reachable")
                  + f" (paired sd {need.sd:.3f} per round, {need.source})"
                  + (f"; this design stops at {p.rounds} round(s)" if (need.rounds or math.inf) > p.rounds else ""),
                  highlight=False)


def _invalid(exc: SpecError) -> typer.Exit:
    """A file that cannot run: one line per problem, exit 1."""
    err.print(f"[red]{escape(exc.source)} is invalid ({len(exc.problems)} problem(s)); nothing was started:[/red]")
    for line in exc.problems:
        err.print(f"  {line}", highlight=False, markup=False)
    return typer.Exit(1)


@app.command()
def validate(
    file: Annotated[Path, typer.Argument(help="experiment YAML")],
    launches: Annotated[bool, typer.Option("--plan", help="also print the rounds a call needs (from the variance "
                                                     "stored for these cells, as the run would use it), and "
                                                     "each rank's exact launch and env file")] = False,
    db: DbOption = None,
) -> None:
    """Check an experiment file (or a bisect file) and print its plan; exit 1 with one line per problem."""
    import shlex

    from specwatch.plan import plan, rank_launches
    from specwatch.spec import is_bisect_file

    if is_bisect_file(file):
        _bisect_plan(_load_bisect(file), db if launches else None, launches)
        return
    spec = _load(file)
    p = plan(spec)
    table = Table(title=f"plan: {spec.name} (baseline {spec.baseline}, {p.rounds} round(s) per arm)")
    for col in ("arm", "image", "platform", "launcher", "method", "k", "cells", "requests"):
        table.add_column(col, overflow="fold")
    for a in p.arms:
        table.add_row(a.arm, a.image, a.platform, a.launcher, a.method, str(a.k or "-"), str(a.cells), a.requests)
    out.print(table)
    out.print(f"launch order: {' '.join(f'{arm}#{round_no}' for arm, round_no in p.order)}"
              + (f" (then up to {spec.design.max_rounds} rounds, one at a time while undecided)"
                 if spec.design.adaptive else ""), highlight=False)
    out.print(f"{len(spec.arms)} arm(s), {p.launches} server launch(es); rough wall time {p.seconds / 60:.1f} min "
              f"(excluding first-time image builds, ~2 min each"
              + ("; an unknown platform is estimated as cpu" if any(a.platform == "unknown" for a in p.arms)
                 else "") + ")")
    if p.launches:
        th, per_launch = spec.thresholds, p.seconds / p.launches / 60
        out.print(f"a busy host: a launch whose cells saw other processes use over {th.host_foreign_cpu:.0%} of the "
                  f"CPU (or {th.host_steal:.0%} stolen, or another process on its GPU) runs again, at most "
                  f"{spec.design.max_redos} time(s), up to +{spec.design.max_redos * per_launch:.1f} min; then the "
                  "run stops as 'host busy'", highlight=False)
    if spec.sweep is not None:  # `specwatch sweep` measures depths instead of the cells above
        sw, limit = spec.sweep, spec.context_limit
        depths = sw.depths_for(limit[0], spec.workload.max_tokens) if limit else sw.depths
        shown = depths or f"powers of two from {sw.min_depth} up to the server's max_model_len"
        out.print(f"sweep (specwatch sweep): depths {shown}, {sw.runs} timed run(s) per depth after one warm-up",
                  highlight=False)
    if launches:
        _power(spec, p, db)
        for r in rank_launches(spec, p.platforms):
            out.print(f"\narm {r.arm} rank {r.rank} ({r.role}) on {r.host}:\n  {shlex.join(r.argv)}\n  env file:",
                      highlight=False, markup=False, soft_wrap=True)
            for name, value in r.env.items():
                out.print(f"    {name}={value}", highlight=False, markup=False, soft_wrap=True)


def _flow_outcome(call: Callable[[], RunOutcome], kept: str) -> RunOutcome:
    """A flow's outcome, or one line and the exit code when it could not run or was interrupted."""
    try:
        outcome = call()
    except KeyboardInterrupt:
        raise _fail(f"interrupted; servers stopped, {kept}", 130) from None
    except Exception as exc:  # the flow records what it measured before anything can get here
        if os.environ.get("SPECWATCH_DEBUG"):
            raise
        raise _fail(f"could not run: {type(exc).__name__}: {exc} (SPECWATCH_DEBUG=1 shows the traceback)") from None
    if outcome.error:
        raise _fail(outcome.error, outcome.exit_code)
    return outcome


@app.command()
def run(
    file: Annotated[Path | None, typer.Argument(help="experiment YAML (not with --resume)")] = None,
    db: DbOption = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="write a machine-readable run summary")] = None,
    resume: Annotated[str | None, typer.Option("--resume", metavar="RUN_ID",
                                               help="continue a stopped run from its run dir's results.json")] = None,
) -> None:
    """Run an A/B experiment: build images, launch each arm, benchmark, store, check, report."""
    if file is None and resume is not None:
        spec, source = _resume_spec(resume)
    elif file is not None and resume is None:
        spec, source = _load(file), file.resolve()
    else:
        raise _fail("give an experiment FILE, or --resume RUN_ID to continue a stopped run (not both)")
    from flows.ab import ab  # imports prefect: only after its environment is set

    outcome = _flow_outcome(lambda: ab(spec, db=str(db) if db else None,
                                       experiment_file=str(source) if source else None, resume=resume),
                            "partial run stored (`specwatch run --resume RUN_ID` continues it; the run id is in "
                            "the log above)")
    out.print(_verdict_table(f"run {outcome.run_id}: {outcome.headline}", outcome.rows))
    for reason in outcome.reasons:
        out.print(f"  {reason}", highlight=False, markup=False)
    for line in outcome.alerts:  # `specwatch alerts` triages them
        out.print(line, highlight=False, markup=False)
    out.print(f"report: {outcome.run_dir / 'report.md'}\ndatabase: {outcome.db_path}")
    if json_path:
        json_path.write_text(outcome.model_dump_json(indent=1))
    raise typer.Exit(outcome.exit_code)


@app.command()
def calibrate(
    file: Annotated[Path, typer.Argument(help="experiment YAML")],
    arm: Annotated[str | None, typer.Option("--arm", metavar="NAME", help="run this arm in both slots (default: "
                                            "the file's two arms, which must be identical apart from name)")]
    = None,
    rounds: Annotated[int, typer.Option("--rounds", help="rounds (one launch per slot each); >= 2")] = 3,
    db: DbOption = None,
) -> None:
    """A/A calibration: one arm in both slots of every round; stores its launch variance per cell and metric."""
    from specwatch.calibrate import CalibrationError, aa_spec

    spec = _load(file)
    try:
        aa_spec(spec, arm, rounds)  # a bad request is one line before anything runs (the flow builds it again)
    except CalibrationError as exc:
        raise _fail(f"calibrate {file}: {exc}; nothing was started") from None
    from flows.calibrate import calibrate as calibrate_flow  # imports prefect: only after its environment is set

    got: list[CalibrationOutcome] = []

    def call() -> RunOutcome:
        got.append(calibrate_flow(spec, arm=arm, rounds=rounds, db=str(db) if db else None,
                                  experiment_file=str(file.resolve())))
        return got[0].run

    outcome = _flow_outcome(call, "partial A/A run stored, no variance stored (calibrate again)")
    cal = got[0]
    out.print(_verdict_table(f"A/A run {outcome.run_id} of arm {cal.arm}: {outcome.headline}", outcome.rows))
    if cal.error:
        raise _fail(f"no variance stored: {cal.error}")
    table = Table(title=f"launch variance stored in {outcome.db_path} (name it with design.variance_from: "
                        f"{outcome.run_id})")
    for col in ("cell", "metric", "sd of log-ratio", "df"):
        table.add_column(col, overflow="fold")
    for v in cal.variances:
        table.add_row(v.cell, v.metric, f"{v.sd:.4f}", str(v.df))
    out.print(table)
    out.print(f"report: {outcome.run_dir / 'report.md'}")
    raise typer.Exit(outcome.exit_code)


@app.command("export-variance")
def export_variance(
    run_id: Annotated[str, typer.Argument(help="the run id of a stored A/A calibration (specwatch calibrate)")],
    out_file: Annotated[Path, typer.Argument(help="the JSON file to write")],
    db: DbOption = None,
) -> None:
    """Write a calibration's launch variances and key to a file that design.variance_from can name, or that
    specwatch/priors/ ships (consulted by every run whose key matches)."""
    from specwatch.store.prior_file import export_calibration
    from specwatch.store.priors import PriorError

    try:
        made = export_calibration(_existing_db(db), run_id, out_file)
    except PriorError as exc:
        raise _fail(str(exc)) from None
    k = made.key
    out.print(f"{len(made.variances)} launch variance(s) of calibration {run_id} (arm {made.arm}) written to "
              f"{out_file}; key: {k.platform}, {k.hardware} x{k.hardware_count}, image {k.image}, model {k.model}",
              highlight=False)


@app.command("sweep")
def sweep_command(
    file: Annotated[Path, typer.Argument(help="experiment YAML (its sweep: section; defaults without one)")],
    db: DbOption = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="write a machine-readable run summary")] = None,
) -> None:
    """Sweep context depth per arm: single-stream decode, TTFT and acceptance at each depth; store, check, plot."""
    spec = _load(file)
    from flows.sweep import sweep  # imports prefect: only after its environment is set

    outcome = _flow_outcome(lambda: sweep(spec, experiment_file=str(file.resolve()), db=str(db) if db else None),
                            "partial run stored")
    report = outcome.run_dir / "sweep.md"
    out.print(f"sweep {outcome.run_id}: {outcome.headline}", highlight=False)
    for reason in outcome.reasons:
        out.print(f"  {reason}", highlight=False, markup=False)
    out.print(f"report: {report}\ndatabase: {outcome.db_path}")
    if json_path:
        json_path.write_text(outcome.model_dump_json(indent=1))
    raise typer.Exit(outcome.exit_code)


@app.command("bisect")
def bisect_command(
    file: Annotated[Path, typer.Argument(help="bisect YAML: ordered images, one arm, a metric, named cells")],
    db: DbOption = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="write the bisect's record as JSON")] = None,
) -> None:
    """Find which version changed a metric: endpoints, then midpoint A/Bs, each culprit verified afresh."""
    spec = _load_bisect(file)
    from flows.bisection import bisect  # imports prefect: only after its environment is set

    try:
        outcome = bisect(spec, db=str(db) if db else None, bisect_file=str(file.resolve()))
    except KeyboardInterrupt:
        raise _fail("interrupted; servers stopped, the steps so far are stored (`specwatch sql --name "
                    "past-bisects`)", 130) from None
    record = outcome.record
    if record is None:
        raise _fail(outcome.error or "could not bisect", outcome.exit_code)
    table = Table(title=f"bisect {record.bisect_id}: {record.headline}")
    for col in ("#", "kind", "baseline", "candidate", "decision", "change", "interval", "rounds", "launches"):
        table.add_column(col, overflow="fold")
    for st in record.steps:
        table.add_row(str(st.step), st.kind, st.older_version, st.newer_version, st.outcome,
                      _num(None if st.estimate is None else st.estimate * 100, "+.1f", "%"),
                      f"[{st.low:+.1%}, {st.high:+.1%}]" if st.low is not None and st.high is not None
                      and math.isfinite(st.low) and math.isfinite(st.high) else "-", str(st.rounds), str(st.launches))
    out.print(table)
    for note in record.notes:
        out.print(f"  {note}", highlight=False, markup=False)
    if record.skipped:
        out.print(f"skipped (did not build or boot): {', '.join(record.skipped)}", highlight=False)
    out.print(f"errors: {record.error_statement}\n{len(record.steps)} A/B(s), {record.launches} launch(es), "
              f"{record.wall_s / 60:.1f} min\nreport: {outcome.report}\ndatabase: {outcome.db_path}", highlight=False)
    if json_path:
        json_path.write_text(record.model_dump_json(indent=1))
    if outcome.error or record.status == "stopped":
        raise _fail(outcome.error or f"{file}: {record.headline}", outcome.exit_code)
    raise typer.Exit(outcome.exit_code)


def _resume_spec(run_id: str) -> tuple[ExperimentSpec, Path | None]:
    """The experiment a stopped run ran, from its results.json (the file may have changed since)."""
    from pydantic import ValidationError

    from specwatch.store.rundir import RunDirError, read_raw

    run_dir = paths.runs_dir() / run_id
    try:
        previous = read_raw(run_dir)
    except (FileNotFoundError, RunDirError) as exc:
        raise _fail(f"cannot resume {run_id}: {exc}") from None
    try:
        spec = resolve(ExperimentSpec.model_validate(previous.experiment), source=run_id)
    except ValidationError as exc:
        raise _fail(f"cannot resume {run_id}: its stored experiment no longer validates "
                    f"({exc.errors(include_url=False)[0]['msg']})") from None
    except SpecError as exc:
        raise _fail(f"cannot resume {run_id}: its stored experiment no longer validates ({exc.problems[0]})") \
            from None
    source = previous.provenance.experiment_file
    return spec, Path(source) if source else None


def _verdict_table(title: str, rows: list[VerdictRow]) -> Table:
    table = Table(title=title)
    # Narrow terminals fold cells rather than cut them: eleven no-wrap columns shrink to "…" in 80 columns.
    for col in ("arm", "k", "c", "class", "rounds", "decode tok/s", "Δ vs base", "CI %", "TTFT ms", "mean acc len",
                "verdict"):  # per-position curves and the cost model are in the report
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r.arm, str(r.k if r.k is not None else "off"), str(r.concurrency), r.prompt_class, str(r.rounds),
                      _num(r.decode_tok_s, ".1f"), _num(r.delta_pct, "+.1f", "%"), r.ci_pct,
                      _num(r.ttft_s and r.ttft_s * 1e3, ".0f"), _num(r.mean_acceptance_length, ".2f"), r.verdict)
    return table


@app.command()
def report(
    run_id: Annotated[str, typer.Argument(help="a run id (`specwatch sql \"select run_id from runs\"`)")],
    db: DbOption = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="where to write (default: the run dir)")] = None,
) -> None:
    """Regenerate a run's report and plots from DuckDB alone."""
    from specwatch.analysis.verdict import assess
    from specwatch.report.markdown import write_report
    from specwatch.report.rows import headline, verdict_rows
    from specwatch.resolve import stored_spec
    from specwatch.store import db as database
    from specwatch.store.ingest import load
    from specwatch.store.priors import run_priors

    path = _existing_db(db)
    con = database.connect(path, read_only=True)
    try:
        result = load(con, run_id)
    except LookupError as exc:
        raise _fail(str(exc)) from None
    finally:
        con.close()
    spec = stored_spec(result.experiment)
    # the variances stored for this run's key now (a calibration stored after the run is pooled in too)
    assessment = assess(result, spec, run_priors(path, spec, result))
    rows = verdict_rows(result, spec, assessment)
    report_path = write_report(result, spec, assessment, rows, out_dir or paths.runs_dir() / run_id)
    out.print(_verdict_table(f"run {run_id}: {headline(result, assessment)}", rows))
    out.print(f"report: {report_path}")


def _duration(text: str | None) -> float | None:
    """`30s`, `2m`, `90` (seconds)."""
    if text is None:
        return None
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    try:
        return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)
    except ValueError:
        raise _fail(f"--duration {text!r} is not a duration; write e.g. 30s, 2m or 45") from None


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


_BENCH_OPTIONS = {
    "prompt_classes": "--prompt-class", "prompt_tokens": "--prompt-tokens", "max_tokens": "--max-tokens",
    "concurrency": "--concurrency", "requests_per_cell": "--requests", "warmup_requests": "--warmup",
    "duration_s": "--duration", "connect_timeout_s": "--connect-timeout", "read_timeout_s": "--read-timeout",
    "temperature": "--temperature", "seed": "--seed", "request_rates": "--rate", "arrival": "--arrival",
    "burstiness": "--burstiness", "max_concurrency": "--max-concurrency", "protocol": "--protocol",
    "corpus": "--corpus", "nonce": "--nonce", "slo": "--slo", "kv_poll_s": "--kv-poll",
    "client_workers": "--client-workers", "client_transport": "--client-transport",
}


def _slo(text: str | None) -> dict[str, object] | None:
    """`ttft_ms=200,tpot_ms=50` -> {"ttft_ms": "200", ...}; the names and values are checked by SloSpec."""
    if text is None:
        return None
    pairs = [part.split("=", 1) for part in _csv(text)]
    if any(len(p) != 2 for p in pairs):
        raise _fail(f"--slo {text!r}: write NAME=MS pairs separated by commas, e.g. ttft_ms=200,tpot_ms=50")
    return {name.strip(): value.strip() for name, value in pairs}


def _bench_inputs(**fields: object) -> tuple[WorkloadSpec, SamplingSpec]:
    from pydantic import ValidationError

    sampling_keys = {"temperature"}
    try:
        workload = WorkloadSpec.model_validate({k: v for k, v in fields.items() if k not in sampling_keys})
        sampling = SamplingSpec.model_validate({k: v for k, v in fields.items() if k in sampling_keys})
    except ValidationError as exc:
        for e in exc.errors(include_url=False):
            err.print(f"{_bench_option(e['loc'])}: {e['msg'].removeprefix('Value error, ')} (got {e['input']!r})",
                      markup=False)
        raise typer.Exit(1) from None
    problems = list(workload_problems(workload))  # the names: each problem says the value it got
    for loc, problem in problems:
        err.print(f"{_bench_option(loc)}: {problem}", markup=False)
    if problems:
        raise typer.Exit(1)
    return workload, sampling


def _bench_option(loc: tuple[str | int, ...]) -> str:
    """The command-line option a workload field comes from."""
    return _BENCH_OPTIONS.get(str(loc[0]), str(loc[0])) if loc else "options"


@app.command()
def bench(
    endpoint: Annotated[str, typer.Option(help="base URL of a running OpenAI-compatible server with /metrics")],
    model: Annotated[str, typer.Option(help="served model name")],
    concurrency: Annotated[str, typer.Option(help="comma-separated levels ('' for none)")] = "1,4,8,16",
    rate: Annotated[str, typer.Option(help="open-loop cells: comma-separated request rates per second")] = "",
    arrival: Annotated[str, typer.Option(help="open-loop inter-arrival law: poisson or gamma")] = "poisson",
    burstiness: Annotated[float, typer.Option(help="gamma shape (1 = Poisson, < 1 burstier)")] = 1.0,
    max_concurrency: Annotated[int | None, typer.Option(help="open-loop cells: the most requests in flight")] = None,
    prompt_class: Annotated[str, typer.Option(help="comma-separated shipped classes: code, json, prose, qa, math, "
                                              "rag, translation, summarization, multiturn")] = "code,json,prose",
    protocol: Annotated[str, typer.Option(help="completions (/v1/completions) or chat (/v1/chat/completions, "
                                          "the model's chat template)")] = "completions",
    corpus: Annotated[Path | None, typer.Option(help="JSONL prompts (prompt or messages, optional output_tokens) "
                                                "instead of --prompt-class")] = None,
    nonce: Annotated[bool, typer.Option(help="a unique nonce at the front of every prompt; --no-nonce for a "
                                        "prefix-cache study (the prefix-cache gate is then off)")] = True,
    prompt_tokens: Annotated[int, typer.Option(help="prompt length, calibrated with /tokenize")] = 256,
    max_tokens: Annotated[int, typer.Option(help="output length (min_tokens == max_tokens, ignore_eos)")] = 128,
    requests: Annotated[int, typer.Option(help="requests per cell (the prompt pool in --duration mode)")] = 16,
    duration: Annotated[str | None, typer.Option(help="closed loop per cell, e.g. 30s; replaces --requests")] = None,
    warmup: Annotated[int, typer.Option(help="discarded warm-up requests")] = 2,
    warmup_wave: Annotated[bool, typer.Option(help="a discarded wave at each closed cell's concurrency before its "
                                              "window (kernels a GPU compiles per batch shape)")] = True,
    seed: Annotated[int, typer.Option(help="prompt content seed (nonces are always fresh)")] = 0,
    temperature: Annotated[float, typer.Option(help="sampling temperature (0 = greedy)")] = 0.0,
    connect_timeout: Annotated[float, typer.Option(help="seconds")] = 10.0,
    read_timeout: Annotated[float, typer.Option(help="seconds without a byte before a request is a client timeout")]
    = 300.0,
    max_prefix_cache_hit_rate: Annotated[float, typer.Option(help="reject cells at or above this hit rate")] = 0.01,
    client_workers: Annotated[int | None, typer.Option(help="client processes per cell (default: from concurrency)")]
    = None,
    client_transport: Annotated[str, typer.Option(help="httpx, httpx-uvloop, aiohttp or aiohttp-uvloop")]
    = WorkloadSpec.model_fields["client_transport"].default,
    json_path: Annotated[Path | None, typer.Option("--json", help="write the results as JSON")] = None,
    slo: Annotated[str | None, typer.Option(help="goodput SLOs in ms, e.g. ttft_ms=200,tpot_ms=50,e2e_ms=5000")]
    = None,
    kv_poll: Annotated[str, typer.Option(help="/metrics poll period for peak KV-cache usage (>= 1s), or off")]
    = "1s",
    save_result: Annotated[Path | None, typer.Option(
        help="also write each cell as `vllm bench serve --save-result` JSON (vLLM 0.26.0 keys), one line per cell")]
    = None,
    dataset_out: Annotated[Path | None, typer.Option(
        help="also write each cell's prompts into this folder as `vllm bench serve --dataset-name custom` JSONL "
             "(one file per cell), to run the peer on the very same requests")] = None,
) -> None:
    """Benchmark a server that is already running; exit 0 all cells accepted, 4 any rejected, 1 error."""
    import asyncio
    import secrets
    from datetime import UTC, datetime

    from rich.progress import Progress

    from specwatch.bench.client import BenchError, BenchTarget
    from specwatch.bench.document import bench_document
    from specwatch.bench.gates import Gates
    from specwatch.bench.runner import CellsAborted, InProcess, cell_keys, prepare

    try:
        levels = [int(c) for c in _csv(concurrency)]
    except ValueError:
        raise _fail(f"--concurrency {concurrency!r}: write whole numbers separated by commas, e.g. 1,4,8") from None
    try:
        rates = [float(r) for r in _csv(rate)]
    except ValueError:
        raise _fail(f"--rate {rate!r}: write requests per second separated by commas, e.g. 2,4.5,8") from None
    workload, sampling = _bench_inputs(
        concurrency=levels, request_rates=rates, arrival=arrival, burstiness=burstiness,
        max_concurrency=max_concurrency,
        prompt_classes=_csv(prompt_class), prompt_tokens=prompt_tokens, max_tokens=max_tokens,
        requests_per_cell=requests, duration_s=_duration(duration), warmup_requests=warmup, warmup_wave=warmup_wave,
        seed=seed,
        connect_timeout_s=connect_timeout, read_timeout_s=read_timeout, temperature=temperature, protocol=protocol,
        corpus=corpus, nonce=nonce, slo=_slo(slo), kv_poll_s=None if kv_poll == "off" else _duration(kv_poll),
        client_workers=client_workers, client_transport=client_transport,
        # --requests is exact, as vllm bench serve's --num-prompts: a side-by-side run sends the same count.
        # Whole waves at c>=16 size an experiment's cells, whose arms are compared window against window.
        batched_waves=None,
    )
    target = BenchTarget(endpoint.rstrip("/"), model, namespace=f"bench:{secrets.token_hex(8)}",
                         dataset_dir=dataset_out)
    started = datetime.now(UTC)
    total = len(cell_keys(workload))
    gates = Gates(max_prefix_cache_hit_rate, workload.repetition_flag_ratio)
    with Progress(console=err, transient=True) as progress:
        bar = progress.add_task("cells", total=total)
        stopped = None
        try:
            asyncio.run(prepare(target, workload, sampling))
            cells = InProcess(on_cell=lambda _: progress.advance(bar)).measure(target, workload, sampling, gates)
        except CellsAborted as exc:  # the server died or hung: show what was measured before it
            cells, stopped = exc.cells, str(exc)
        except BenchError as exc:
            raise _fail(str(exc)) from None
    table = Table(title=f"{endpoint} {model}")
    for col in ("load", "class", "ok/failed", "sent req/s", "decode tok/s p50", "TTFT ms p50", "aggregate tok/s",
                "server tok/s", "mean acc len", "prefix hit", "max running", "status"):
        table.add_column(col, no_wrap=True)
    for c in cells:
        table.add_row(c.key.level, c.prompt_class, f"{c.requests_ok}/{c.requests_failed}", _num(c.achieved_rate, ".2f"),
                      _num(c.decode_tok_s_median, ".1f"), _num(c.ttft_s_median and c.ttft_s_median * 1e3, ".0f"),
                      _num(c.aggregate_tok_s, ".1f"), _num(c.server_aggregate_tok_s, ".1f"),
                      _num(c.window.mean_acceptance_length, ".2f"), _num(c.window.prefix_cache_hit_rate, ".1%"),
                      str(c.max_running_observed), f"rejected: {c.reject_reason}" if c.rejected else
                      ("; ".join(c.flags) or "ok"))
    out.print(table)
    if json_path:
        doc = bench_document(endpoint, model, started, datetime.now(UTC), workload, sampling, gates, cells)
        json_path.write_text(json.dumps(doc, indent=1))
    if save_result:
        from specwatch.export.vllm_bench import ExportContext, export_cells

        ended = datetime.now(UTC)
        save_result.write_text(export_cells([(c, ExportContext(model, workload.protocol, "specwatch", ended,
                                                               {"specwatch_cell": c.cell})) for c in cells]))
    if stopped:
        raise _fail(f"stopped at {stopped}", 4)
    raise typer.Exit(4 if any(c.rejected for c in cells) else 0)


@app.command()
def export(
    run_dir: Annotated[Path, typer.Argument(help="SPECWATCH_HOME/runs/<run_id>")],
    out_file: Annotated[Path, typer.Option("--out", help="file to write (one JSON object per cell and line)")],
    fmt: Annotated[str, typer.Option("--format", help="vllm-0.26.0: `vllm bench serve --save-result` JSON")]
    = "vllm-0.26.0",
) -> None:
    """Write a run's cells in another tool's format (label = arm name; run, arm, round, cell as metadata keys)."""
    from specwatch.export.vllm_bench import EXPORT_FORMATS, ExportContext, export_cells
    from specwatch.store.rundir import read_raw

    if fmt not in EXPORT_FORMATS:
        raise _fail(f"--format {fmt!r} is not known; the formats are {', '.join(EXPORT_FORMATS)}")
    try:
        result = read_raw(run_dir)
    except (FileNotFoundError, ValueError) as exc:
        raise _fail(str(exc)) from None
    # Read from the stored experiment as written (ExperimentSpec.served_name's rule), not re-validated.
    exp = result.experiment
    served = (exp.get("model") or {}).get("served_name") or result.experiment_name
    protocol = (exp.get("workload") or {}).get("protocol", "completions")
    rows = [(c, ExportContext(served, protocol, arm.name, arm.ended_at, {
        "specwatch_run_id": result.run_id, "specwatch_arm": arm.name, "specwatch_round": str(arm.round),
        "specwatch_cell": c.cell})) for arm in result.arms for c in arm.cells]
    out_file.write_text(export_cells(rows, fmt))
    out.print(f"wrote {len(rows)} cells of run {result.run_id} to {out_file} ({fmt})")


@app.command()
def ingest(run_dir: Annotated[Path, typer.Argument(help="SPECWATCH_HOME/runs/<run_id>")], db: DbOption = None) -> None:
    """Load a run dir's results.json into DuckDB (idempotent: re-ingesting replaces the run's rows)."""
    from specwatch.store.db import DatabaseError
    from specwatch.store.ingest import ingest as ingest_run
    from specwatch.store.rundir import read_raw

    try:
        result = read_raw(run_dir)
        counts = ingest_run(result, db or paths.default_db())
    except (FileNotFoundError, ValueError, DatabaseError) as exc:
        raise _fail(f"{exc}; the run dir is unchanged, run this again once the database is writable"
                    if isinstance(exc, DatabaseError) else str(exc)) from None
    out.print(f"ingested run {result.run_id}: " + ", ".join(f"{n} {t}" for t, n in counts.items()))


@app.command()
def sql(
    query: Annotated[str | None, typer.Argument(help="SQL to run against the history (or --name)")] = None,
    name: Annotated[str | None, typer.Option("--name", help="a named query from sql/queries (--list shows them)")]
    = None,
    param: Annotated[list[str] | None, typer.Option("--param", help="NAME=VALUE for --name; repeatable")] = None,
    list_queries: Annotated[bool, typer.Option("--list", help="list the named queries and their parameters")] = False,
    db: DbOption = None,
    fmt: Annotated[str, typer.Option("--format", help="table, csv or json")] = "table",
) -> None:
    """Query the history: `specwatch sql "select * from cell_results"` or `specwatch sql --name k-vs-k ...`."""
    import duckdb

    from specwatch.store import db as database
    from specwatch.store import queries

    if list_queries:
        out.print(queries.catalogue(), markup=False, highlight=False)
        return
    if (query is None) == (name is None):
        raise _fail("pass SQL or --name NAME, not both or neither (`specwatch sql --list` shows the named queries)")
    if param and name is None:
        raise _fail("--param goes with --name (named queries)")
    if fmt not in ("table", "csv", "json"):
        raise _fail(f"--format {fmt!r} is not one of table, csv, json")
    path = _existing_db(db)
    if name is not None:
        try:
            params = queries.parse_param_args(param)
            queries.resolve(name, params)  # name and parameter errors before the file is opened
            con = queries.connect(path)
            try:
                frame = queries.run_named(con, name, params)
            finally:
                con.close()
        except queries.QueryError as exc:
            raise _fail(str(exc)) from None
    else:
        assert query is not None  # checked above: SQL or --name
        con = database.connect(path, read_only=True)
        try:
            frame = database.query_df(con, query)
        except duckdb.Error as exc:
            raise _fail(f"query failed: {exc}") from None
        finally:
            con.close()
    if fmt == "csv":
        frame.to_csv(sys.stdout, index=False)
    elif fmt == "json":
        out.print_json(frame.to_json(orient="records", date_format="iso"))
    else:
        frame = frame.astype(object).where(frame.notna(), None)
        table = Table()
        for col in frame.columns:
            table.add_column(str(col))
        for row in frame.itertuples(index=False):
            table.add_row(*("" if v is None else str(v) for v in row))
        out.print(table)
        out.print(f"{len(frame)} row(s)")


@app.command()
def history(
    series: Annotated[str, typer.Option("--series", help="a series key or its prefix (default: all)")] = "",
    db: DbOption = None,
    plots: Annotated[Path | None, typer.Option("--plots", help="write a PNG per series into this folder")] = None,
) -> None:
    """List each series: its latest value, trend and change points (ruptures + Welch t-test, p < 0.001)."""
    from specwatch.analysis.metrics import trends
    from specwatch.store import history as hist
    from specwatch.store import queries

    path = _existing_db(db)
    con = queries.connect(path)
    try:
        frame = hist.points(con, series)
    finally:
        con.close()
    if frame.empty:
        raise _fail(f"no series {'starting with ' + repr(series) if series else 'in the history yet'}")
    table = Table(title=f"{path}: series")
    for col in ("series", "what", "runs", "latest", *(m.label for m in trends()), "trend/run", "change points"):
        table.add_column(col, overflow="fold")
    for s in hist.summarize(frame):
        changes = [f"{stamp} {t.metric.trend} {cp.change:+.1%}" for t in s.trends for stamp, cp in t.changes]
        table.add_row(s.key[:12], s.label, str(s.points), s.latest_version,
                      *(_num(t.latest, t.metric.fmt) for t in s.trends), _num(s.per_run, "+.2%"),
                      "\n".join(changes) or "-")
        if plots:
            hist.plot(frame, s, plots)
    out.print(table)
    if plots:
        out.print(f"plots: {plots}")


@app.command("serve")
def serve_command(
    port: Annotated[int, typer.Option(help="Prefect server port on 127.0.0.1")] = 4200,
) -> None:
    """Start a Prefect server (SQLite under SPECWATCH_HOME), apply the deployments, start a worker."""
    import time

    from cli.serve import ServeError, serve
    from specwatch.engine import processes

    # A service manager or container engine stops with SIGTERM: unwind as on Ctrl-C, so that the `with`
    # below stops the server and the worker instead of leaving them to init.
    processes.install_signal_handlers()
    try:
        stack = serve(port)
    except ServeError as exc:
        raise _fail(str(exc)) from None
    except KeyboardInterrupt:
        raise _fail("interrupted while starting; everything started was stopped", 130) from None
    with stack:
        out.print(f"Prefect UI: {stack.api_url.removesuffix('/api')}  (API {stack.api_url})\n"
                  f"deployments applied from deployments/prefect.yaml; worker on pool specwatch-process\n"
                  f"point the CLI at it with: export PREFECT_API_URL={stack.api_url}\n"
                  "Ctrl-C or SIGTERM stops everything.")
        try:
            while all(p.poll() is None for p in stack.procs):
                time.sleep(1)
            err.print("a Prefect process exited; stopping the stack (logs under SPECWATCH_HOME/logs)")
        except KeyboardInterrupt:
            pass


@app.command("dashboard")
def dashboard_command(
    db: DbOption = None,
    port: Annotated[int, typer.Option(help="port to listen on")] = paths.DASHBOARD_PORT,
    host: Annotated[str, typer.Option(help="address to listen on (0.0.0.0: every interface)")] = "127.0.0.1",
) -> None:
    """Browse the history: alerts with triage, trends per series, baseline vs candidate per run, reports."""
    from specwatch.dashboard.server import Dashboard, make_server
    from specwatch.engine import processes
    from specwatch.store.db import DatabaseError

    processes.install_signal_handlers()  # SIGTERM (a service manager) stops it as Ctrl-C does
    dash = Dashboard(db or paths.default_db())
    try:
        dash.prepare()
        server = make_server(dash, host, port)
    except DatabaseError as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"--port {port}: cannot listen on {host}:{port} ({exc.strerror}); pick another port") from None
    out.print(f"dashboard: http://{host}:{port}/  (database {dash.db_path})\nCtrl-C or SIGTERM stops it.",
              highlight=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main() -> None:
    app()
