"""Re-judge a stored run's cells with today's gates (specwatch.bench.gates), into a copy of its run dir.

A gate's threshold can change after a run was measured (thresholds.min_running_share came from the
H200 runs of benchmarks/README.md section 7). The gates are pure functions of what every cell
stores, so the same cells can be judged again; the copy's results.json says which cells changed.
The original run dir is never written.

    .venv/bin/python benchmarks/regate.py RUN_DIR OUT_DIR
    .venv/bin/python -m cli ingest OUT_DIR --db X.duckdb && .venv/bin/python -m cli report RUN_ID --db X.duckdb
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specwatch.bench.gates import Gates, gate  # noqa: E402
from specwatch.resolve import stored_spec  # noqa: E402
from specwatch.store.rundir import read_raw, write_raw  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out_dir", type=Path)
    a = ap.parse_args()
    result = read_raw(a.run_dir)
    gates = Gates.of(stored_spec(result.experiment))
    arms, changed = [], 0
    for arm in result.arms:
        cells = []
        for cell in arm.cells:
            judged = gate(cell, gates)
            if judged.rejected != cell.rejected:
                changed += 1
                print(f"{arm.name} round {arm.round} c={cell.concurrency}: "
                      f"{cell.reject_reason or 'accepted'} -> {judged.reject_reason or 'accepted'}")
            cells.append(judged)
        arms.append(arm.model_copy(update={"cells": cells}))
    shutil.copytree(a.run_dir, a.out_dir, dirs_exist_ok=True)
    write_raw(result.model_copy(update={"arms": arms}), a.out_dir)
    print(f"{changed} of {sum(len(arm.cells) for arm in arms)} cells judged differently; wrote {a.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
