"""How long a batched cell must be (issue 22): what the shared H200 run's c>=16 cells say.

Reads every request of the shared real-model run (SmolLM2-135M, ngram k7 vs k5, 3 rounds, c=16 and
c=64 cells of 4 waves, 2-6 s each) and prints, for the cells at c >= 16:

1. Each cell's wall time, and the share of it after the last request was sent (the drain: fewer than
   c streams run, so the aggregate counts a ramp-down, not the batch).
2. The drain's own noise: per arm and cell, the launch-to-launch sd of log(aggregate / steady rate),
   where the steady rate is the token rate while every slot was busy (tokens spread evenly over each
   request's decode time). It scales as 1/waves: the drain is one request's time, the window is waves
   of them.
3. The steady rate's noise within a window: the sd of the log token rate over bins of 0.25, 0.5 and
   1 s inside each cell.
4. The launch-to-launch sd of the cell's log aggregate tok/s, per arm and cell: what longer cells do
   not remove (the rounds do).
5. Per cell, the sd over the 3 rounds of the round's value as the sequential decision would take it:
   the log-ratio of aggregate tok/s, the median paired per-request log-ratio of decode tok/s, and the
   log-ratio of the cells' median decode tok/s.
6. A model of the window's own noise in a round's log-ratio at W waves (drain from 2, scaled by 4/W;
   steady from 3's 1 s bins over the steady time, which grows with W), with the H200 cells' time per
   wave, so a default can be read off.

    python benchmarks/cell_length.py [RESULTS_JSON_GZ] > benchmarks/results/cell_length.txt
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

from specwatch.store.rundir import upgrade

ROOT = Path(__file__).resolve().parent.parent
# ../shared from the main checkout, ../../shared from a worktree under wt/
SHARED_RUN = next((p for p in (ROOT.parent / "shared", ROOT.parent.parent / "shared") if p.is_dir()),
                  ROOT.parent / "shared") / "data/h200-smollm2-k7-vs-k5/results.json.gz"
BATCHED = 16


def _ok(cell: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in cell["requests"] if r["status"] == "ok"]


def _steady_end(cell: dict[str, Any]) -> float:
    """Seconds from the window's start to the last request's send: every slot was busy until then."""
    return max(r["started_s"] for r in _ok(cell))


def token_rate(cell: dict[str, Any], width: float, end: float) -> np.ndarray:
    """Output tok/s in consecutive bins of `width` seconds up to `end`, each request's tokens after the
    first spread evenly over its decode time."""
    bins = np.zeros(max(1, int(end // width)))
    for r in _ok(cell):
        a, b = r["started_s"] + r["ttft_s"], r["started_s"] + r["e2e_s"]
        if b <= a:
            continue
        for i in range(len(bins)):
            bins[i] += (r["completion_tokens"] - 1) * max(0.0, min(b, (i + 1) * width) - max(a, i * width)) / (b - a)
    return bins / width


def _pooled(sds: list[float]) -> float:
    return math.sqrt(float(np.mean(np.square(sds))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="?", type=Path, default=SHARED_RUN)
    args = ap.parse_args()
    with gzip.open(args.results) as f:
        run = upgrade(json.load(f))  # a run recorded before schema 5 numbers its rounds as `block`
    cells = {(a["name"], a["round"], c["concurrency"], c["prompt_class"]): c
             for a in run["arms"] for c in a["cells"] if c["concurrency"] and c["concurrency"] >= BATCHED}
    arms = sorted({k[0] for k in cells})
    groups = sorted({k[2:] for k in cells})
    rounds = sorted({k[1] for k in cells})

    print("1. cells at c>=16: wall s, waves, drain share (after the last send)")
    drain_share: list[float] = []
    wave_s: dict[int, list[float]] = {}
    for key, cell in sorted(cells.items()):
        share = 1 - _steady_end(cell) / cell["wall_s"]
        drain_share.append(share)
        waves = len(_ok(cell)) / key[2]
        wave_s.setdefault(key[2], []).append(cell["wall_s"] / waves)
        print(f"   {key[0]}#{key[1]} c={key[2]} {key[3]:5s}: {cell['wall_s']:5.2f} s, {waves:.0f} waves, "
              f"drain {share:.1%}")
    print(f"   drain share: median {median(drain_share):.1%}, range {min(drain_share):.1%}-{max(drain_share):.1%}; "
          + ", ".join(f"c={c}: {median(v):.2f} s per wave" for c, v in sorted(wave_s.items())))

    drain = []
    for arm in arms:
        for g in groups:
            v = [math.log(cells[(arm, b, *g)]["aggregate_tok_s"]
                          / token_rate(cells[(arm, b, *g)], _steady_end(cells[(arm, b, *g)]) / 1.0001,
                                       _steady_end(cells[(arm, b, *g)])).mean()) for b in rounds]
            drain.append(float(np.std(v, ddof=1)))
    print(f"2. drain noise (launch-to-launch sd of log aggregate/steady, 4 waves): pooled {_pooled(drain):.3f}")

    print("3. steady token rate within a cell, sd of log over bins (median over cells):")
    for width in (0.25, 0.5, 1.0):
        sds = [float(np.std(np.log(r), ddof=1)) for c in cells.values()
               if len(r := token_rate(c, width, _steady_end(c))) >= 2 and (r > 0).all()]
        print(f"   {width:4.2f} s bins: {median(sds):.3f} ({len(sds)} cells)")
    bin_sd = median(float(np.std(np.log(r), ddof=1)) for c in cells.values()
                    if len(r := token_rate(c, 1.0, _steady_end(c))) >= 2 and (r > 0).all())

    print("4. launch-to-launch sd of log aggregate tok/s:")
    for arm in arms:
        print(f"   {arm}: " + ", ".join(
            f"c={g[0]} {g[1]} {np.std([math.log(cells[(arm, b, *g)]['aggregate_tok_s']) for b in rounds], ddof=1):.3f}"
            for g in groups))

    print("5. sd over rounds of the round value (candidate vs baseline):")
    base, cand = run["experiment"]["baseline"], next(a for a in arms if a != run["experiment"]["baseline"])
    per: dict[str, list[float]] = {"aggregate": [], "paired median": [], "median ratio": []}
    for g in groups:
        vals: dict[str, list[float]] = {name: [] for name in per}
        for b in rounds:
            bc, cc = cells[(base, b, *g)], cells[(cand, b, *g)]
            vals["aggregate"].append(math.log(cc["aggregate_tok_s"] / bc["aggregate_tok_s"]))
            vals["median ratio"].append(math.log(cc["decode_tok_s_median"] / bc["decode_tok_s_median"]))
            rb = {r["index"]: r["decode_tok_s"] for r in _ok(bc) if r["decode_tok_s"]}
            rc = {r["index"]: r["decode_tok_s"] for r in _ok(cc) if r["decode_tok_s"]}
            vals["paired median"].append(median(math.log(rc[i] / rb[i]) for i in rb.keys() & rc.keys()))
        for name, v in vals.items():
            per[name].append(float(np.std(v, ddof=1)))
        print(f"   c={g[0]} {g[1]:5s}: " + ", ".join(f"{name} {per[name][-1]:.3f}" for name in per))
    print("   pooled: " + ", ".join(f"{name} {_pooled(s):.3f}" for name, s in per.items()))

    print("6. the window's own sd in a round's log-ratio (both arms), by waves W:")
    for w in (4, 8, 16, 32):
        row = []
        for c, per_wave in sorted(wave_s.items()):
            steady_s = w * median(per_wave) * (1 - median(drain_share))
            one_arm = math.hypot(_pooled(drain) * 4 / w, bin_sd / math.sqrt(max(steady_s, 1.0)))
            row.append(f"c={c}: {w * median(per_wave):5.1f} s, sd {math.sqrt(2) * one_arm:.3f}")
        print(f"   W={w:2d}: drain ~{median(drain_share) * 4 / w:.1%}; " + "; ".join(row))


if __name__ == "__main__":
    main()
