"""A real Prefect stack on this host: `prefect server start` (SQLite under the state dir),
the process work pool, the cluster concurrency limit, the deployments, and a worker.

Used by `specwatch serve` (and `make serve`) and by the integration test, so the test
exercises exactly what users start.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from specwatch import paths
from specwatch.engine import processes
from specwatch.engine.ready import NotReady, wait_healthy

WORK_POOL = "specwatch-process"
PREFECT_FILE = "deployments/prefect.yaml"
ON_DEMAND = "specwatch-ab/ab-on-demand"
# The on-demand form opens pre-filled with this experiment (the one `make demo` runs).
DEMO_EXPERIMENT = "examples/cpu-ngram.yaml"
REPO = Path(__file__).resolve().parents[1]


class ServeError(Exception):
    pass


def _prefect() -> list[str]:
    return [sys.executable, "-m", "prefect"]


def stack_env(home: Path, api_url: str) -> dict[str, str]:
    """Environment for every process of the stack: one Prefect home, analytics off, loopback API."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update({
        "PREFECT_HOME": str(home / "prefect-server"),
        "PREFECT_API_URL": api_url,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_EXTRA_LOGGERS": "specwatch",
        "SPECWATCH_HOME": str(home),
        "SPECWATCH_REPO": str(REPO),
    })
    return env


@dataclass
class Stack:
    api_url: str
    home: Path
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return stack_env(self.home, self.api_url)

    def cli(self, *args: str, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess:
        # wide enough that prefect's tables do not truncate names
        proc = subprocess.run([*_prefect(), *args], env={**self.env, "COLUMNS": "200"}, cwd=REPO,
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise ServeError(f"prefect {' '.join(args)} failed: {(proc.stderr or proc.stdout).strip()[-400:]}")
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            processes.stop(proc, grace_s=15.0)
        self.procs.clear()

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_server(home: Path, port: int = 4200, timeout_s: float = 120.0) -> Stack:
    """`prefect server start` on loopback; returns once /api/health answers."""
    api_url = f"http://127.0.0.1:{port}/api"
    stack = Stack(api_url=api_url, home=home)
    env = stack.env
    env.pop("PREFECT_API_URL")  # the server itself must not try to reach an API...
    env["PREFECT_UI_API_URL"] = api_url  # ...but its UI must call this port, not the default 4200
    Path(env["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)
    log = home / "logs" / "prefect-server.log"
    stack.procs.append(processes.spawn(
        [*_prefect(), "server", "start", "--host", "127.0.0.1", "--port", str(port)], env, log))
    try:
        wait_healthy(f"{api_url}/health", timeout_s, stack.procs[0].poll, poll_s=0.5)
    except NotReady as exc:
        stack.stop()
        raise ServeError(f"prefect server: {exc}; see {log}") from None
    except BaseException:  # SIGTERM or Ctrl-C while it boots: the server goes with it
        stack.stop()
        raise
    return stack


def apply_deployments(stack: Stack, cluster: str = "local") -> str:
    """Work pool, the cluster's concurrency limit (one run at a time), and every deployment."""
    _create(stack, "work-pool", "create", WORK_POOL, "--type", "process")
    _create(stack, "gcl", "create", f"cluster-{cluster}", "--limit", "1")
    out = stack.cli("deploy", "--all", "--prefect-file", PREFECT_FILE, timeout=300).stdout
    prefill_on_demand(stack)
    return out


def prefill_on_demand(stack: Stack) -> None:
    """Give the on-demand deployment the demo experiment as its default, so the UI form starts filled.

    prefect.yaml holds parameters as literal YAML; the experiment file stays the one source.
    """
    from specwatch.resolve import load_spec

    experiment = load_spec(REPO / DEMO_EXPERIMENT).model_dump(mode="json")
    with httpx.Client(base_url=stack.api_url, timeout=30) as api:
        deployment = api.get(f"/deployments/name/{ON_DEMAND}")
        deployment.raise_for_status()
        api.patch(f"/deployments/{deployment.json()['id']}",
                  json={"parameters": {"experiment": experiment}}).raise_for_status()


def _create(stack: Stack, *args: str) -> None:
    """Create a Prefect object; one that already exists (a restarted stack) is fine."""
    proc = stack.cli(*args, check=False)
    if proc.returncode != 0 and "already exists" not in proc.stdout + proc.stderr:
        raise ServeError(f"prefect {' '.join(args)} failed: {(proc.stderr or proc.stdout).strip()[-400:]}")


def start_worker(stack: Stack, query_seconds: float = 5.0) -> subprocess.Popen:
    env = {**stack.env, "PREFECT_WORKER_QUERY_SECONDS": str(query_seconds)}
    worker = processes.spawn([*_prefect(), "worker", "start", "--pool", WORK_POOL], env,
                             stack.home / "logs" / "prefect-worker.log")
    stack.procs.append(worker)
    return worker


def serve(port: int = 4200, home: Path | None = None) -> Stack:
    stack = start_server(home or paths.home(), port)
    try:
        apply_deployments(stack)
        start_worker(stack)
    except BaseException:
        stack.stop()
        raise
    return stack
