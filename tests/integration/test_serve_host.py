"""`serve staging` against real tritonservers: the pointer moves (a promotion, then a
rollback), the host swaps to each release behind its one port under steady open-loop load,
and no request fails.

The two releases are published to the project's store as the publish stage writes them
(tests/support/example_releases.py), without measuring them first: what is tested here is
the host, and two pipeline runs would triple the test's time. The second differs from the
first by a shorter queue delay, which does not slow it.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from pipeline.measure.open_loop import Phase, open_loop
from pipeline.measure.targets import spec_target
from pipeline.release.pointer_event import PointerAction
from pipeline.release.pointers import move_pointer
from pipeline.servers import server_kind
from pipeline.servers.base import RunningEndpoints
from pipeline.servers.ports import free_ports, port_is_bound
from pipeline.servers.specs import load_spec
from pipeline.servers.triton.server import SHM_DIR, SHM_PREFIX
from tests.support.cli import cli
from tests.support.example_releases import publish_example

pytestmark = pytest.mark.integration

RATE = 25.0               # requests a second, on a schedule
SEGMENT_S = 2.0           # open-loop windows back to back until the swaps are done
SWAP_TIMEOUT_S = 150.0


class SteadyLoad:
    """Open-loop windows back to back, in a thread, until `stop`; every outcome counted."""

    def __init__(self, project: Path, url: str) -> None:
        loaded = load_spec(project / "serve.yaml", "staging")
        server = server_kind(loaded.spec.server.kind).attach(loaded, RunningEndpoints(url=url))
        self.target = spec_target(loaded, server)
        self.completed = 0
        self.errors: Counter[str] = Counter()
        self.windows = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        while not self._stop.is_set():
            result = await open_loop(self.target, [Phase("steady", RATE, SEGMENT_S)],
                                     timeout_s=10.0)
            window = result.phases["steady"]
            self.completed += window.completed
            self.errors.update(window.errors)
            self.windows += 1

    def __enter__(self) -> SteadyLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(SEGMENT_S + 30)


def status(port: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/serve-pipeline/status",
                                    timeout=5) as reply:
            body: dict[str, Any] = json.loads(reply.read())
            return body
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def wait_until_serving(port: int, release_id: str, serving: subprocess.Popen[bytes],
                       log: Path) -> dict[str, Any]:
    deadline = time.monotonic() + SWAP_TIMEOUT_S
    while time.monotonic() < deadline:
        assert serving.poll() is None, f"serve exited: {log.read_text()}"
        shown = status(port)
        if shown is not None and shown["release_id"] == release_id:
            return shown
        time.sleep(0.25)
    raise AssertionError(f"never served {release_id}: {log.read_text()}")


def test_serve_swaps_on_promotion_and_rollback_without_a_failed_request(
        fast_project: Path, tmp_path: Path, no_leftovers: Callable[[], None]) -> None:
    spec = fast_project / "serve.yaml"
    store = fast_project / ".serve-pipeline" / "store"
    first = publish_example(spec, store, tmp_path / "one", environment="staging")
    spec.write_text(spec.read_text().replace("max_queue_delay: 2ms", "max_queue_delay: 1ms"))
    second = publish_example(spec, store, tmp_path / "two", environment=None)
    port = free_ports(1)[0]
    log = tmp_path / "serve.log"
    with log.open("wb") as output:
        serving = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "serve", "staging", "--port", str(port),
             "--interval", "0.5", "--listen", "127.0.0.1"],
            cwd=fast_project, stdout=output, stderr=subprocess.STDOUT)
    servers: list[psutil.Process] = []
    try:
        wait_until_serving(port, first.release_id, serving, log)
        with SteadyLoad(fast_project, f"http://127.0.0.1:{port}") as load:
            time.sleep(SEGMENT_S)
            move_pointer(first.store, first.loaded.spec.name, "staging", second.release_id,
                         PointerAction.PROMOTE, "alice")
            wait_until_serving(port, second.release_id, serving, log)
            servers = psutil.Process(serving.pid).children(recursive=True)
            back = cli(["rollback", "staging"], fast_project)
            assert back.returncode == 0, back.stderr
            shown = wait_until_serving(port, first.release_id, serving, log)
            time.sleep(SEGMENT_S)
    finally:
        serving.send_signal(signal.SIGTERM)
        exit_code = serving.wait(90)
    said = log.read_text()
    assert exit_code == 0, said
    assert load.windows >= 3 and load.completed > 0
    assert dict(load.errors) == {}, said
    assert [(swap["from"], swap["to"]) for swap in shown["swaps"]] == [
        (first.release_id, second.release_id), (second.release_id, first.release_id)]
    assert f"switched to {second.release_id}; draining {first.release_id}" in said
    assert "Traceback" not in said
    # Everything it started is gone, the port is free, and no shared memory is left.
    assert servers and not any(process.is_running() for process in servers)
    no_leftovers()
    assert not port_is_bound(port)
    assert list(SHM_DIR.glob(f"{SHM_PREFIX}sp{serving.pid}x*")) == []
