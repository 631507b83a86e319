"""What the host-load gate sees (issue 33): the foreign CPU share per cell on a quiet host and beside a
neighbour of N busy loops, and what that neighbour does to the measured decode rate.

Each condition is one launch of a fake_vllm server (command launcher, 10 ms steps) measured over a few
cells by the engine's own run_arm, with the host sampler the flows use; the neighbour's loops are reparented
to init, as another user's job is. Prints one row per condition: foreign CPU per cell (min, median, max)
and the cells' median decode tok/s against the quiet condition's.

    .venv/bin/python benchmarks/host_load.py --neighbours 0,1,2 --cells 6

Run it on an otherwise idle host (it refuses to, naming what else runs, unless --anyway).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
from pathlib import Path

from _common import busy_processes

from specwatch.bench.runner import InProcess
from specwatch.engine.arm import run_arm
from specwatch.engine.images.registry import backend_for
from specwatch.engine.launchers import LaunchContext
from specwatch.records import CheckpointFacts
from specwatch.resolve import resolve
from specwatch.spec import ExperimentSpec
from specwatch_testing.experiments import LOADED_HOST, command_ab, fake_checkpoint
from specwatch_testing.hog import neighbour


def spec_for(tmp: Path, cells: int) -> ExperimentSpec:
    doc = command_ab("host-load", str(fake_checkpoint(tmp / "ckpt")), sys.executable)
    doc["arms"] = doc["arms"][:1]  # one arm: the conditions are the neighbour, not the server
    doc["arms"][0]["args"] = ["--accept-probs", "0.9,0.8,0.7", "--step-ms", "10"]
    doc["baseline"] = doc["arms"][0]["name"]
    doc["workload"] = {**doc["workload"], "prompt_classes": ["code", "prose"], "max_tokens": 64,
                       "requests_per_cell": 4, "concurrency": list(range(1, cells // 2 + 1))}
    doc["thresholds"] = LOADED_HOST  # measured, not gated
    doc["design"] = {**doc["design"], "probes": 0}
    return resolve(ExperimentSpec.model_validate(doc))


def measure(spec: ExperimentSpec, tmp: Path, loops: int) -> tuple[list[float], list[float]]:
    arm = spec.arms[0]
    image = backend_for(spec.image(arm.image)).ensure(spec.image(arm.image))
    ctx = LaunchContext(model_dir=tmp / "ckpt", served_name=spec.served_name, arm_dir=tmp / f"arm-{loops}",
                        max_model_len=None, run_id="host-load", launch_name=f"host-load-{loops}")
    facts = CheckpointFacts(path=tmp / "ckpt", config_sha256="c" * 64)
    if loops:
        with neighbour(loops):
            result = run_arm(arm, spec, image, ctx, facts, f"host-load-{loops}", runner=InProcess())
    else:
        result = run_arm(arm, spec, image, ctx, facts, f"host-load-{loops}", runner=InProcess())
    if result.status != "ok":
        raise SystemExit(f"launch failed: {result.reason}")
    foreign = [c.host.foreign_cpu for c in result.cells if c.host is not None]
    rates = [c.decode_tok_s_median for c in result.cells if c.decode_tok_s_median]
    return foreign, rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--neighbours", default="0,1,2", help="busy loops beside the server, per condition")
    ap.add_argument("--cells", type=int, default=6)
    ap.add_argument("--anyway", action="store_true", help="measure even if other busy processes run")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if (others := busy_processes()) and not args.anyway:
        raise SystemExit(f"not an idle host: {'; '.join(others[:3])} (--anyway measures regardless)")
    quiet_rate = None
    print("| busy loops beside | cells | foreign CPU min / median / max | decode tok/s median | vs quiet |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="host-load-") as tmpdir:
        tmp = Path(tmpdir)
        spec = spec_for(tmp, args.cells)
        for loops in [int(n) for n in args.neighbours.split(",")]:
            foreign, rates = measure(spec, tmp, loops)
            rate = statistics.median(rates)
            quiet_rate = quiet_rate or rate
            print(f"| {loops} | {len(foreign)} | {min(foreign):.3f} / {statistics.median(foreign):.3f} / "
                  f"{max(foreign):.3f} | {rate:.1f} | {rate / quiet_rate - 1:+.1%} |", flush=True)


if __name__ == "__main__":
    main()
