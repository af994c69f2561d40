"""The processes that run the model (Triton's python-backend stubs, TorchServe's workers),
watched from readiness on.

One of them dying is the server failing although the server process lives on. Seen with
tritonserver 2.51: a stub killed under load is never restarted; every request to its
instance is answered HTTP 500 ("Stub process '<instance>' is not healthy"), nothing is
logged, and the server's graceful shutdown then waits for the dead instance until it is
killed. TorchServe starts another worker, with another pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable
from pathlib import Path

import psutil


def exit_status(pid: int) -> str:
    """How a process that has not been reaped yet ended ("killed by SIGKILL"), read from
    /proc/<pid>/stat (the zombie keeps its wait status there); "" when that is unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        status = int(fields[-1])
    except (OSError, ValueError, IndexError):
        return ""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(number).name}"
        return f"killed by signal {number}"
    if os.WIFEXITED(status):
        return f"exited with code {os.WEXITSTATUS(status)}"
    return ""


class ModelProcesses:
    """The model's processes in a server's tree, found by a mark in their command line."""

    def __init__(self, mark: str, what: str) -> None:
        self.mark = mark          # "triton_python_backend_stub"
        self.what = what          # "the python-backend stub", in messages
        self.watched: list[psutil.Process] = []

    def watch(self, tree: Iterable[psutil.Process],
              retired: Iterable[psutil.Process] = ()) -> None:
        """From now on, these are the model's processes (the server is ready); `retired`
        ones (a previous config's, still exiting) are not."""
        old = set(retired)      # psutil compares pid and start time: a reused pid differs
        found = []
        for process in tree:
            with contextlib.suppress(psutil.Error):
                if process not in old and any(self.mark in part for part in process.cmdline()):
                    found.append(process)
        self.watched = found

    def forget(self) -> list[psutil.Process]:
        """The model is being reloaded on purpose: its processes exit, nothing failed.
        Returns them, so that the caller can wait for them and leave them out."""
        retired, self.watched = self.watched, []
        return retired

    def dead(self) -> psutil.Process | None:
        """The first watched process that is gone or a zombie (psutil's is_running also
        checks the start time, so a reused pid does not pass for the old process)."""
        for process in self.watched:
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    continue
            except psutil.NoSuchProcess:
                pass
            return process
        return None

    def describe(self, process: psutil.Process) -> str:
        how = "is gone"
        with contextlib.suppress(psutil.Error):
            if process.is_running() and process.status() == psutil.STATUS_ZOMBIE:
                how = exit_status(process.pid) or "ended"
        return f"model process died: {self.what} (pid {process.pid}) {how}"
