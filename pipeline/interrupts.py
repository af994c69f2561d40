"""An interrupt (Ctrl-C, SIGTERM) kept as a fact, not only as an exception.

The handler raises KeyboardInterrupt wherever the main thread is. Where that is inside a
finalizer (`__del__`) Python prints and drops it, and inside an asyncio task it may end
only that task: the run would go on, and publish what the operator meant to stop. So the
handler also sets this flag; the runner starts no stage once it is set and treats a stage
that returned after it as interrupted, and a load loop stops on it.
"""

from __future__ import annotations

import threading

_requested = threading.Event()


def request() -> None:
    _requested.set()


def requested() -> bool:
    return _requested.is_set()


def clear() -> None:
    """A new command starts uninterrupted (in-process callers, such as tests, run many)."""
    _requested.clear()
