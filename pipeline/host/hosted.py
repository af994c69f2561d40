"""One release started on this host: unpacked from the store, checked, started on free
loopback ports, ready, and through parity; or the one line that says why not.

It reuses what the regression check does to serve the live release beside a candidate
(pipeline/regression/live_serving.py): every blob checked, the artifact unpacked (never
rebuilt) and its config rendered from the release's own spec and held to the digest the
release recorded.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.host.adapters import parity
from pipeline.model.reference import ReferenceFailed
from pipeline.regression.live_serving import LiveUnservable, live_spec, restore_release
from pipeline.release.manifest_record import Manifest
from pipeline.release.store.base import Store
from pipeline.servers import http, server_kind
from pipeline.servers.base import ModelServer
from pipeline.servers.ports import loopback_ports
from pipeline.spec.models import LoadedSpec
from pipeline.stage_result import StageResult, Status


class Stopping(Exception):
    """The host is stopping: nothing more is started."""


@dataclass(frozen=True)
class HostedRelease:
    release_id: str
    loaded: LoadedSpec          # the release's own spec
    server: ModelServer
    base_url: str               # where its HTTP port answers (loopback)
    folder: Path


class Fleet:
    """Every server the host started, so that each is stopped: at a swap, and all of them
    when the host stops (also those still starting, in another thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers: list[ModelServer] = []
        self._closing = False

    def adopt(self, server: ModelServer) -> None:
        """Track `server` before it starts; Stopping once the host stops."""
        with self._lock:
            if self._closing:
                raise Stopping
            self._servers.append(server)

    def retire(self, server: ModelServer) -> None:
        server.stop()
        with self._lock:
            if server in self._servers:
                self._servers.remove(server)

    def stop_all(self) -> None:
        with self._lock:
            self._closing = True
            servers = list(self._servers)
        for server in servers:
            self.retire(server)


def start_release(store: Store, manifest: Manifest, here: LoadedSpec, folder: Path,
                  env: Mapping[str, str], fleet: Fleet) -> HostedRelease:
    """`manifest`'s release ready and through parity, its files and logs in `folder`
    (`here`: the spec this host was started with, for the workspace parity's samples are
    read from). LiveUnservable (IntegrityFailed for a blob) says why not; its server is
    stopped again."""
    try:
        loaded = live_spec(store, manifest, here)
        server_spec = loaded.spec.server
        if server_spec.runtime != "process":
            raise LiveUnservable(f"it runs in a container image ({server_spec.runtime} "
                                 "runtime); `serve` starts the local server process only")
        folder.mkdir(parents=True, exist_ok=True)
        kind = server_kind(server_spec.kind)
        ports = loopback_ports(kind.port_names)
        artifact = restore_release(store, manifest, loaded, folder)
        server = kind.launch(loaded, artifact, ports, folder / "server", env)
        fleet.adopt(server)
    except BaseException:
        # Nothing ran yet: no log worth keeping, only what was fetched.
        shutil.rmtree(folder, ignore_errors=True)
        raise
    try:
        checked = _checked(loaded, server, artifact.model_file, folder, env)
    except BaseException:
        fleet.retire(server)
        raise
    if checked.status is not Status.PASSED:
        fleet.retire(server)
        said = checked.message.splitlines()[0] if checked.message else "no message"
        raise LiveUnservable(f"parity {checked.status.value}: {said}")
    url = f"http://127.0.0.1:{ports[kind.spec.http_port]}"
    return HostedRelease(manifest.release_id, loaded, server, url, folder)


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _checked(loaded: LoadedSpec, server: ModelServer, model_file: Path, folder: Path,
             env: Mapping[str, str]) -> StageResult:
    try:
        server.start()
        server.wait_ready(loaded.spec.stages.readiness.timeout.seconds)
    except (PipelineError, OSError) as exc:
        raise LiveUnservable(f"not ready: {_first_line(exc)}") from None
    try:
        return parity(loaded, server, model_file, folder / "parity", env)
    except (PipelineError, ReferenceFailed, http.Unreachable, OSError) as exc:
        raise LiveUnservable(f"parity could not run: {_first_line(exc)}") from None


def keep_only_records(folder: Path) -> None:
    """What a release's folder keeps once its server is stopped: its logs and its parity
    record. The artifact, the model and the repositories the server read are copies of
    the store's blobs, a few times the model's size for every start: a host that runs for
    months and swaps often would otherwise fill its disk."""
    if not folder.is_dir():
        return
    for path in sorted(folder.rglob("*"), key=lambda found: len(found.parts), reverse=True):
        if path.is_symlink() or path.is_file():
            if path.suffix != ".log" and path.name != "record.json":
                path.unlink(missing_ok=True)
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
