"""After a server stops, its GPU memory must be released: decided from nvidia-smi's compute-apps listing
(recorded output here; CPU CI has no GPU), and a no-op on a host without nvidia-smi."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specwatch.engine import gpu
from specwatch.engine.handle import ProcessMember, ServerHandle
from specwatch.records import LaunchRecord

# `nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits`
# on an H200 host with a vLLM server and its engine core running, and a process it may not see.
APPS = """GPU-5f3c9a2e-1b7d-4e0a-9c1d-2a6b8e4f0c11, 48211, python3, 127540
GPU-5f3c9a2e-1b7d-4e0a-9c1d-2a6b8e4f0c11, 48390, VLLM::EngineCore, 2048
GPU-5f3c9a2e-1b7d-4e0a-9c1d-2a6b8e4f0c11, [N/A], [N/A], [N/A]
"""


def test_a_stopped_servers_pids_still_listed_hold_memory() -> None:
    apps = gpu.parse_apps(APPS)
    assert [(a.pid, a.name, a.used_mib) for a in apps] == [(48211, "python3", 127540.0),
                                                          (48390, "VLLM::EngineCore", 2048.0)]
    assert gpu.still_held(apps, {48390, 50000}) == \
        "pid 48390 (VLLM::EngineCore) holds 2048 MiB on GPU-5f3c9a2e-1b7d-4e0a-9c1d-2a6b8e4f0c11"
    assert gpu.still_held(apps, {50000}) is None  # other processes' memory is the precheck's business
    assert gpu.still_held(gpu.parse_apps(""), {48211}) is None  # nothing listed: released


def test_no_nvidia_smi_is_a_no_op(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    t0 = time.monotonic()
    assert gpu.released_after_stop({1, 2, 3}, timeout_s=30) is None
    assert time.monotonic() - t0 < 0.1


def test_handle_stop_reports_memory_a_killed_server_still_holds(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    # an nvidia-smi that goes on listing the server's pid after it is gone (a process stuck in the driver)
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho 'GPU-0000, {server.pid}, python3, 30000'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(gpu, "released_after_stop",
                        lambda pids, timeout_s=30.0, poll_s=1.0, real=gpu.released_after_stop: real(pids, 0.3, 0.1))
    handle = ServerHandle("http://127.0.0.1:1", LaunchRecord(launcher="command", base_url="http://127.0.0.1:1"),
                          members=[ProcessMember(server, None, grace_s=2.0)])
    handle.stop()
    assert server.poll() is not None
    assert handle.gpu_held == (f"GPU memory still held 0s after the server stopped: pid {server.pid} (python3) "
                               "holds 30000 MiB on GPU-0000")

