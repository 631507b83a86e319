"""Long-running servers stop on SIGTERM, the way a service manager or a container engine stops them: the
CLI process and everything it started (the Prefect server, the worker and what they fork) are gone, and
its port is free. Each server runs as a user runs it, a `specwatch` subprocess."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from specwatch.engine import processes
from specwatch.engine.launchers import free_port
from specwatch_testing.cli import alive, descendants, start_specwatch, stop_tree


def sigterm_leaves_nothing(proc: subprocess.Popen[str], port: int, expect_children: bool) -> None:
    tree = descendants(proc.pid)
    assert bool(tree) == expect_children, f"processes started: {sorted(tree)}"
    assert processes.listeners(port), f"nothing listens on {port} before SIGTERM"
    try:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = sorted(pid for pid in tree if alive(pid))
        assert not left, f"left running after SIGTERM: {left}"
        assert not processes.listeners(port), f"port {port} still listened on after SIGTERM"
        assert code in (0, 130), code
    finally:
        stop_tree(proc, tree)


def test_sigterm_stops_specwatch_serve_and_the_prefect_server_and_worker_it_started(tmp_path: Path) -> None:
    port = free_port()
    proc = start_specwatch(["serve", "--port", str(port)], tmp_path, "SIGTERM stops everything", timeout_s=240)
    sigterm_leaves_nothing(proc, port, expect_children=True)


def test_sigterm_stops_specwatch_dashboard(tmp_path: Path) -> None:
    from specwatch.store import db

    path = tmp_path / "h.duckdb"
    db.connect(path).close()
    port = free_port()
    proc = start_specwatch(["dashboard", "--db", str(path), "--port", str(port)], tmp_path, "SIGTERM stops it",
                           timeout_s=60)
    sigterm_leaves_nothing(proc, port, expect_children=False)
