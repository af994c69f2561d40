"""A record left `running` by a run whose process is gone (kill -9, a lost machine).

The runner writes the record after every stage and finishes it in a `finally`; only a
process that dies without running its `finally` leaves `running` behind. A reader on the
same machine can tell: the record names the run's pid, and either no process has that pid
now, or the one that has it started after the run did (the pid was reused). On another
machine nothing can be told, and the record stays `running`.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from datetime import datetime

import psutil

from pipeline.record import RunRecord
from pipeline.stage_result import RunStatus

# When a pid's process started (seconds since the epoch); None when no process has it.
ProcessStart = Callable[[int], float | None]


def process_start(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def abandoned_reason(record: RunRecord, node: str | None = None,
                     started: ProcessStart = process_start) -> str | None:
    """Why `record` can no longer finish, or None when it may still be running."""
    if record.status != RunStatus.RUNNING:
        return None
    pid = record.host.get("pid")
    if not isinstance(pid, int) or record.host.get("node") != (node or platform.node()):
        return None
    try:
        run_started = datetime.fromisoformat(
            str(record.started_at).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    process_started = started(pid)
    # A second's slack: the record's start is taken after the process started.
    if process_started is not None and process_started <= run_started + 1.0:
        return None
    finished = len(record.stages)
    return (f"the run's process (pid {pid} on {record.host.get('node')}) ended without "
            f"finishing its record, after {finished} stage{'s' if finished != 1 else ''}: "
            "it was killed, or the machine stopped, and the stages after it have no result")


def mark_if_abandoned(record: RunRecord, node: str | None = None,
                      started: ProcessStart = process_start) -> RunRecord:
    """`record` with status `abandoned` and the reason under `abandoned`, when it is."""
    reason = abandoned_reason(record, node, started)
    if reason is not None:
        record.status = RunStatus.ABANDONED
        record.extra["abandoned"] = reason
        record.with_keys("abandoned")
    return record
