"""Child processes that always stop: own process group, terminate → wait → kill."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import psutil

# util-linux's setpriv (in every Debian and Ubuntu base image): the child is sent SIGTERM
# when the thread that started it dies, so a tool killed with SIGKILL (a CI job's timeout,
# the OOM killer) leaves no tritonserver holding ports, memory or a GPU, and its graceful
# stop still removes its /dev/shm regions. The signal reaches the process started only; a
# server whose program is a launcher (TorchServe's, which starts Java and waits) runs under
# `group_leader`, which passes it on to the whole group. None where setpriv is missing
# (then nothing does).
SETPRIV = shutil.which("setpriv")
GROUP_LEADER = [sys.executable, "-I", "-S", str(Path(__file__).with_name("group_leader.py"))]


def log_tail(path: Path, lines: int = 12) -> list[str]:
    """The last non-blank lines of a log file (none if it does not exist yet)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


class ManagedProcess:
    """A subprocess in its own session whose output goes to a log file.

    Ctrl-C in the terminal reaches only our process group, so the child is
    stopped by our teardown, in order, rather than by the terminal.
    """

    def __init__(self, argv: Sequence[str], log_path: Path, env: Mapping[str, str],
                 cwd: Path | None = None, launcher: bool = False) -> None:
        """`launcher`: the program starts the server as a child of its own (TorchServe's
        launcher starts Java), so the tool's death must reach the whole group."""
        self.argv = list(argv)
        self.launcher = launcher
        self.log_path = log_path
        self.env = dict(env)
        self.cwd = cwd
        self._popen: subprocess.Popen[bytes] | None = None
        self.led = False              # started under group_leader
        self._stopping = threading.Lock()
        self._stopped = False
        self.started_at = 0.0

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = self.argv
        # Tied to the main thread only: the signal follows the starting thread, and a
        # worker thread (the `serve` host's) may end while its server should go on.
        if SETPRIV is not None and threading.current_thread() is threading.main_thread():
            self.led = self.launcher
            argv = [SETPRIV, "--pdeathsig", "TERM", "--",
                    *(GROUP_LEADER if self.led else []), *argv]
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env, cwd=self.cwd, start_new_session=True)
        self.started_at = time.monotonic()
        return self

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise RuntimeError("process not started")
        return self._popen.pid

    def poll(self) -> int | None:
        return None if self._popen is None else self._popen.poll()

    def is_running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def describe_exit(self) -> str:
        code = self.poll()
        if code is None:
            return "still running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with code {code}"

    def log_tail(self, lines: int = 12) -> list[str]:
        return log_tail(self.log_path, lines)

    def tree(self) -> list[psutil.Process]:
        """The process and all its descendants that still exist; under a group leader, the
        leader's descendants only (it is ours, not the server's: its memory is not the
        server's)."""
        if not self.is_running():
            return []
        try:
            root = psutil.Process(self.pid)
            descendants: list[psutil.Process] = root.children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        return descendants if self.led else [root, *descendants]

    def stopped_note(self) -> str:
        """" (its process 123 is stopped: ...)" when a process of the tree is stopped by a
        signal or a debugger: why it does not answer, though it is alive; else ""."""
        for process in self.tree():
            try:
                state = process.status()
            except psutil.Error:
                continue
            if state in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
                return (f" (its process {process.pid}, {process.name()}, is stopped: a "
                        "SIGSTOP, a job-control stop or a debugger holds it)")
        return ""

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM the group, wait up to `grace_s`, then SIGKILL whatever is left of it.
        Idempotent: a second call (from another thread too) returns once the first is done."""
        with self._stopping:
            if self._popen is None or self._stopped:
                return
            self._stop_group(grace_s)
            self._stopped = True

    def _stop_group(self, grace_s: float) -> None:
        assert self._popen is not None
        members = self._group_members()
        if self._popen.poll() is None:
            self._signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout=grace_s)
        self._signal_group(signal.SIGKILL)
        self._popen.wait()
        _, alive = psutil.wait_procs(members, timeout=5.0)
        for process in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()

    def _group_members(self) -> list[psutil.Process]:
        members = []
        for process in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(process.pid) == self.pid:
                    members.append(process)
            except (ProcessLookupError, PermissionError, psutil.Error):
                continue
        return members

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def __enter__(self) -> ManagedProcess:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
