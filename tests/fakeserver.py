"""Start `specwatch.fake_vllm` as a real subprocess for tests (reusable by any test module)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_vllm_cmd(port: int, args: list[str]) -> list[str]:
    return [sys.executable, "-m", "specwatch.fake_vllm", "--port", str(port), *args]


def fake_vllm_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM the whole process group, then SIGKILL if it lingers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace_s)
            break
        except subprocess.TimeoutExpired:
            continue
    if proc.poll() is None:
        proc.wait(timeout=grace_s)


@contextmanager
def run_fake_vllm(
    args: list[str],
    *,
    log_path: Path | None = None,
    wait_healthy: bool = True,
    ready_timeout_s: float = 15.0,
) -> Iterator[str]:
    """Yield the base URL of a fake vLLM started with `args`; stdout+stderr go to `log_path`."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        log = log_path or Path(tmp) / "fake_vllm.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                fake_vllm_cmd(port, args),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=fake_vllm_env(),
                start_new_session=True,  # own process group: the finalizer kills all of it
            )
        url = f"http://127.0.0.1:{port}"
        try:
            if wait_healthy:
                deadline = time.monotonic() + ready_timeout_s
                while True:
                    if proc.poll() is not None:
                        raise RuntimeError(f"fake_vllm exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
                    try:
                        if httpx.get(f"{url}/health", timeout=0.5).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"fake_vllm not healthy in {ready_timeout_s}s:\n{log.read_text()[-2000:]}")
                    time.sleep(0.05)
            yield url
        finally:
            stop_group(proc)
