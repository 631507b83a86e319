"""A CPU neighbour for interference tests: busy processes that are NOT below the test's process (specwatch
counts its own process tree as the run's), ended by pid when the block exits."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress

# The program name the report shows for it (argv[0] of the exec'd interpreter stays python; the marker
# argument makes it recognisable in `top` lists).
MARKER = "specwatch-test-hog"


@contextmanager
def neighbour(processes: int) -> Iterator[list[int]]:
    """`processes` busy loops, each reparented to init (a shell that exits at once started them), so that
    they are foreign to this process tree, as a real neighbour's job is."""
    code = shlex.quote("while True: pass")
    # each subshell prints its loop's pid and exits, so the loop's parent becomes init
    script = " ".join(f"({shlex.quote(sys.executable)} -c {code} {MARKER} </dev/null >/dev/null 2>&1 & echo $!);"
                      for _ in range(processes))
    pids = [int(p) for p in subprocess.run(["sh", "-c", script], check=True, capture_output=True,
                                           text=True).stdout.split()]
    try:
        yield pids
    finally:
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
