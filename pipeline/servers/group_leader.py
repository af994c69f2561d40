"""Run a server that starts processes of its own, and stop all of them if the tool dies.

`setpriv --pdeathsig TERM` sends SIGTERM to the process it starts when the tool dies (a
kill -9 runs no teardown). TorchServe's `torchserve --foreground` is a launcher that starts
the Java frontend and then only waits: SIGTERM ends the launcher and leaves Java and its
workers running. This leader sits between the two, as the process group's leader:

    python -m pipeline.servers.group_leader <argv...>

- When SIGTERM arrives and the tool that started it is gone (its parent changed), it sends
  SIGTERM to the whole group (Java and its workers are in it), so the server stops
  gracefully as it would at teardown.
- When SIGTERM arrives from the tool's own teardown (which signals the whole group), the
  group already has it, and the leader only goes on waiting.
- It exits as its child did: the same code, or killed by the same signal.

It imports nothing but the standard library: it starts in tens of milliseconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: python -m pipeline.servers.group_leader <command...>\n")
        return 2
    parent = os.getppid()

    def forward(signum: int, frame: FrameType | None) -> None:
        if os.getppid() != parent:           # the tool is gone: nobody else stops the group
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.killpg(os.getpgrp(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    child = subprocess.Popen(argv)
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:   # pragma: no cover (PEP 475 retries; kept for clarity)
            continue
    if code < 0:                   # mirror a death by signal, so the exit reads the same
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
