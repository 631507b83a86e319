"""Start `specwatch_testing.fake_vllm` as a real subprocess (tests and benchmarks both use it)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specwatch.engine import processes
from specwatch.engine.launchers import free_port
from specwatch.engine.ready import NotReady, wait_healthy

# The project checkout this distribution was installed from (`make install` installs it editable).
REPO = Path(__file__).resolve().parents[2]


def fake_vllm_argv(port: int | str, args: list[str]) -> list[str]:
    return [sys.executable, "-m", "specwatch_testing.fake_vllm", "--port", str(port), *args]


def child_pids(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (a multi-process fake_vllm's servers), from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            if ppid == pid:
                found.append(int(entry))
    return sorted(found)


@contextmanager
def run_fake_vllm(
    args: list[str], *, log_path: Path | None = None, wait_healthy_s: float | None = 15.0
) -> Iterator[str]:
    """Yield the base URL of a fake vLLM started with `args` (see `fake_vllm_process`)."""
    with fake_vllm_process(args, log_path=log_path, wait_healthy_s=wait_healthy_s) as (url, _):
        yield url


@contextmanager
def fake_vllm_process(
    args: list[str],
    *,
    log_path: Path | None = None,
    wait_healthy_s: float | None = 15.0,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Yield the base URL and the process of a fake vLLM started with `args`; stdout+stderr go to `log_path`.

    `wait_healthy_s=None` yields at once, before the server answers. The process group is stopped on exit.
    """
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        log = log_path or Path(tmp) / "fake_vllm.log"
        proc = processes.spawn(fake_vllm_argv(port, args), dict(os.environ), log)
        url = f"http://127.0.0.1:{port}"
        try:
            if wait_healthy_s is not None:
                try:
                    wait_healthy(f"{url}/health", wait_healthy_s, proc.poll, poll_s=0.05)
                except NotReady as exc:
                    raise RuntimeError(f"fake_vllm {exc}:\n{log.read_text()[-2000:]}") from None
            yield url, proc
        finally:
            processes.stop(proc, grace_s=5.0)
