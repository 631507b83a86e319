"""Import time of the load generator's package and of the other layers, each in a fresh interpreter.

`specwatch bench` and every benchmark worker process pay the first number; the target is under
0.3 s, with heavy libraries (scipy, pandas, ruptures, GE, Prefect) imported only where used.

    .venv/bin/python benchmarks/import_time.py [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

MODULES = [
    "specwatch.bench.runner",  # the load generator: client, protocols, load shapes, cell, gates
    "specwatch.records",
    "specwatch.engine.arm",
    "specwatch.analysis.verdict",
    "specwatch.store.ingest",
    "tasks.arms",
    "cli.app",
]
TARGET_S = 0.3


def once(module: str) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh interpreters per module (median quoted)")
    a = parser.parse_args()
    print(f"{'module':32} {'median s':>9} {'min s':>7} {'max s':>7}  ({a.runs} fresh interpreters each)")
    medians = {}
    for module in MODULES:
        once(module)  # warm the file cache
        times = [once(module) for _ in range(a.runs)]
        medians[module] = statistics.median(times)
        print(f"{module:32} {medians[module]:9.3f} {min(times):7.3f} {max(times):7.3f}")
    bench = medians[MODULES[0]]
    verdict = "met" if bench < TARGET_S else "MISSED"
    print(f"load generator ({MODULES[0]}): {bench:.3f} s; target < {TARGET_S} s: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
