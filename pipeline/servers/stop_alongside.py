"""A server stopped alongside the rest of a run's resources, not after them.

A graceful server shutdown is mostly waiting (Triton's python backend unloads its model,
then polls once a second): a second server stopped after the first adds its whole
shutdown to the run. `stop_alongside` registers a server so that, when the resources
close, its stop begins first, in a thread, and is waited for last, after everything the
stack held before it has closed.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack

from pipeline.servers.base import ModelServer


class _BackgroundStop:
    def __init__(self, server: ModelServer) -> None:
        self._server = server
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def begin(self) -> None:
        self._thread = threading.Thread(target=self._stop, name="stop-alongside", daemon=True)
        self._thread.start()

    def _stop(self) -> None:
        try:
            self._server.stop()
        except BaseException as exc:  # re-raised in the closing thread by join
            self._error = exc

    def join(self) -> None:
        if self._thread is None:  # begin never ran (closing failed before it)
            self._server.stop()
            return
        self._thread.join()
        if self._error is not None:
            raise self._error


def stop_alongside(resources: ExitStack, server: ModelServer) -> None:
    """Have `resources` stop `server`, when they close, concurrently with what they hold
    already: its stop begins before those close and is waited for after them."""
    earlier = resources.pop_all()
    stopping = _BackgroundStop(server)
    resources.callback(stopping.join)
    resources.push(earlier)
    resources.callback(stopping.begin)
