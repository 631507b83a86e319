"""Prefect's own task-failure tracebacks, as one line in the user's log; the traceback goes to the run dir.

A failed stage is already recorded with its reason (a failed arm, a rejected cell); a screenful of
traceback in the log buries that reason, yet whoever debugs specwatch needs it. Records of Prefect's
run loggers that carry a traceback are rewritten to their first line plus where the traceback is.
"""

from __future__ import annotations

import contextlib
import logging
import traceback
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

TRACEBACKS_FILE = "tracebacks.log"
# Where Prefect logs a task's or a flow's failure (prefect.task_engine / prefect.flow_engine).
PREFECT_RUN_LOGGERS = ("prefect.task_runs", "prefect.flow_runs")


class OneLineFailures(logging.Filter):
    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not record.exc_info and "Traceback (most recent call last)" not in message:
            return True
        detail = "".join(traceback.format_exception(*record.exc_info)) if record.exc_info else ""
        with self.path.open("a") as f:
            f.write(f"--- {datetime.now(UTC).isoformat()} {record.name}\n{message}\n{detail}\n")
        first = message.splitlines()[0] if message else type(record.exc_info[1]).__name__ if record.exc_info else ""
        record.msg, record.args = f"{first[:300]} (traceback in {self.path})", ()
        record.exc_info, record.exc_text = None, None
        return True


@contextlib.contextmanager
def tracebacks_to(run_dir: Path) -> Iterator[Path]:
    """While a flow runs: Prefect's failure tracebacks go to run_dir/tracebacks.log, one line stays in the log."""
    path = run_dir / TRACEBACKS_FILE
    one_line = OneLineFailures(path)
    loggers = [logging.getLogger(name) for name in PREFECT_RUN_LOGGERS]
    for logger in loggers:
        logger.addFilter(one_line)
    try:
        yield path
    finally:
        for logger in loggers:
            logger.removeFilter(one_line)
