import os
import signal
import sys
import time
from pathlib import Path

from specwatch.engine import processes

# A parent that forks a child into its own process group, as vLLM forks engine workers.
TREE = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); " \
       "print('up', flush=True); time.sleep(300)"
STUBBORN = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); "
            "time.sleep(300)")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def group_members(pgid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


def group_gone(pgid: int, timeout: float = 5.0) -> bool:
    """SIGKILL is asynchronous: give the kernel a moment to take the members down."""
    deadline = time.monotonic() + timeout
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def wait_for_line(path: Path, text: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in (path.read_text() if path.exists() else ""):
        assert time.monotonic() < deadline, f"{text!r} never appeared in {path}"
        time.sleep(0.05)


def test_stop_kills_the_whole_process_group(tmp_path: Path) -> None:
    proc = processes.spawn([sys.executable, "-c", TREE], dict(os.environ), tmp_path / "log")
    wait_for_line(tmp_path / "log", "up")
    assert len(group_members(proc.pid)) == 2
    assert proc.pid in processes.live_pids()
    processes.stop(proc)
    assert group_gone(proc.pid)
    assert proc.pid not in processes.live_pids()


def test_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    proc = processes.spawn([sys.executable, "-c", STUBBORN], dict(os.environ), tmp_path / "log")
    wait_for_line(tmp_path / "log", "up")
    t0 = time.monotonic()
    code = processes.stop(proc, grace_s=0.5)
    assert code == -signal.SIGKILL
    assert time.monotonic() - t0 < 5
    assert not alive(proc.pid)


def test_stop_all_stops_everything_still_live(tmp_path: Path) -> None:
    procs = [processes.spawn([sys.executable, "-c", TREE], dict(os.environ), tmp_path / f"log{i}") for i in range(2)]
    for i in range(2):
        wait_for_line(tmp_path / f"log{i}", "up")
    processes.stop_all()
    assert all(group_gone(p.pid) for p in procs)
    assert processes.live_pids() == []


def test_a_second_interrupt_while_stopping_kills_the_group_at_once(tmp_path: Path, monkeypatch) -> None:
    proc = processes.spawn([sys.executable, "-c", STUBBORN], dict(os.environ), tmp_path / "log")
    wait_for_line(tmp_path / "log", "up")
    real_wait = proc.wait

    def interrupted(timeout=None):  # the Ctrl-C that arrives while we wait out the grace period
        monkeypatch.setattr(proc, "wait", real_wait)
        raise KeyboardInterrupt

    monkeypatch.setattr(proc, "wait", interrupted)
    t0 = time.monotonic()
    try:
        processes.stop(proc, grace_s=30)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the interrupt must propagate")
    assert group_gone(proc.pid) and time.monotonic() - t0 < 5
    processes.stop_all()  # the exit handler's pass finds it dead and forgets it
    assert processes.live_pids() == []
