"""Start `specwatch.fake_vllm` as a real subprocess for tests (reusable by any test module)."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from specwatch import processes
from tasks.arm import free_port

REPO = Path(__file__).resolve().parents[1]


def fake_vllm_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


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
        proc = processes.spawn([sys.executable, "-m", "specwatch.fake_vllm", "--port", str(port), *args],
                               fake_vllm_env(), log)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + ready_timeout_s
            while wait_healthy:
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
            processes.stop(proc, grace_s=5.0)
