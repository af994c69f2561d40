"""How long the client's own threads waited for a CPU (Linux's per-thread schedstat).

A closed-loop client that is short of CPU sends late and reads answers late; its window
measures the machine, not the model. The run-queue wait of all our threads over a window
tells it apart from a slow server.
"""

from __future__ import annotations

from pathlib import Path

_TASKS = Path("/proc/self/task")


def runqueue_wait_s() -> dict[str, float] | None:
    """Each thread's total run-queue wait so far (s); None where schedstat is missing."""
    waits: dict[str, float] = {}
    try:
        for task in _TASKS.iterdir():
            try:
                fields = (task / "schedstat").read_text().split()
            except OSError:
                continue   # the thread ended meanwhile
            waits[task.name] = int(fields[1]) / 1e9
    except OSError:
        return None
    return waits or None


def waited_since(before: dict[str, float] | None) -> float | None:
    """Run-queue wait of our threads since `before` (threads new since then from 0)."""
    after = runqueue_wait_s()
    if before is None or after is None:
        return None
    return sum(wait - before.get(thread, 0.0) for thread, wait in after.items())
