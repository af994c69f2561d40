"""What every in-place reconfiguration does around its kind's own API call: the old
config's model processes retire (their exit is not the server dying), the new config must
become ready, and memory is measured only once the old processes are gone.

Each kind's API is turned on only for tune's own servers, on loopback; a production
config keeps it off.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import psutil

from pipeline.errors import ServerError
from pipeline.servers import http
from pipeline.servers.model_processes import ModelProcesses

OLD_PROCESS_EXIT_S = 30.0      # an unload waits for in-flight requests; a busy machine is slow


def swap_config(processes: ModelProcesses, tree: Callable[[], list[psutil.Process]],
                apply: Callable[[], None], wait_ready: Callable[[], object]) -> None:
    """`apply` the new config, wait until it is ready and the old processes are gone,
    then watch the new config's processes."""
    # Triton loads the new instances before it unloads the old ones, so the old ones may
    # still be running when the new config is ready; they are never watched again.
    retired = processes.forget()
    apply()
    wait_ready()
    psutil.wait_procs(retired, timeout=OLD_PROCESS_EXIT_S)
    _wait_for_old_processes(tree)
    processes.watch(tree(), retired)


def call_api(kind: str, method: str, url: str, body: bytes, headers: dict[str, str],
             timeout_s: float, label: str) -> None:
    try:
        reply = http.call(method, url, body or None, headers, timeout_s=timeout_s)
    except http.Unreachable as exc:
        raise ServerError(f"reconfiguring {kind} for {label}: {exc}") from None
    if reply.status not in (200, 201, 202):
        raise ServerError(f"{kind} refused {label} ({method} {reply.status}): "
                          f"{reply.text()[:300]}")


def _wait_for_old_processes(tree: Callable[[], list[psutil.Process]], quiet_s: float = 1.0,
                            limit_s: float = 15.0) -> None:
    """The previous config's worker processes take a moment to exit; memory is measured
    on the new config's processes only once the tree stops changing."""
    deadline = time.monotonic() + limit_s
    last, since = len(tree()), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet_s:
        time.sleep(0.1)
        count = len(tree())
        if count != last:
            last, since = count, time.monotonic()
