"""The host loop: the environment's release behind the stable port, the pointer re-read on
SIGHUP and every interval, a swap only after the new release passed readiness and parity
here, and everything stopped on SIGTERM or Ctrl-C.

Blocking work (the store, starting and checking a release, stopping a server) runs in
worker threads, so the proxy keeps answering through all of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import socket
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pipeline.errors import PipelineError, ServerError, StoreError, UsageError
from pipeline.host.hosted import Fleet, HostedRelease, keep_only_records, start_release
from pipeline.host.proxy import STATUS_PATH, ReverseProxy, Upstream
from pipeline.host.watch import Keep, PointerRead, PointerWatch
from pipeline.preflight import Scope, require_ready
from pipeline.regression.live_serving import IntegrityFailed, LiveUnservable, live_spec
from pipeline.release.deployable import deployable_in, deployable_release
from pipeline.release.manifest import iso, utc_now
from pipeline.release.manifest_record import Manifest
from pipeline.release.pointers import read_pointer
from pipeline.release.store.base import Store
from pipeline.servers import server_kind
from pipeline.servers.ports import port_holder
from pipeline.spec.models import LoadedSpec

# How long requests still in flight on the old release may take to finish after a swap.
DRAIN_TIMEOUT_S = 60.0

_Result = TypeVar("_Result")


@dataclass(frozen=True)
class HostSettings:
    store: Store
    environment: str
    here: LoadedSpec               # the spec the host was started with (name, workspace)
    listen: str                    # the address the stable port is bound on
    port: int | None               # None: the release's production HTTP port
    interval_s: float
    folder: Path                   # each release's files and logs: a folder in here
    env: Mapping[str, str]         # what servers are started with
    say: Callable[[str], None]     # one line for the operator


def first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def stable_port(loaded: LoadedSpec) -> int:
    """The release's production HTTP port: the spec's `server.ports`, else the kind's."""
    kind = server_kind(loaded.spec.server.kind).spec
    return loaded.spec.server.ports.get(kind.http_port) or \
        kind.production_ports[kind.http_port]


WATCH_S = 1.0          # how often the served release's server is checked


def _taken(listen: str, port: int) -> bool:
    """Whether another socket holds `listen:port` (any other failure, an address that is
    not this host's, is the proxy's own bind to report)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((listen, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


class Signals:
    """SIGTERM and SIGINT stop the host; SIGHUP asks for a re-read of the pointer."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.reread = asyncio.Event()

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.add_signal_handler(signal.SIGTERM, self.stop.set)
        loop.add_signal_handler(signal.SIGINT, self.stop.set)
        loop.add_signal_handler(signal.SIGHUP, self.reread.set)

    def remove(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in self.SIGNALS:
            loop.remove_signal_handler(sig)

    async def next_read(self, interval_s: float) -> bool | None:
        """None once the host is to stop; True when a re-read was asked for, False when
        the interval passed."""
        waits = {asyncio.ensure_future(self.stop.wait()),
                 asyncio.ensure_future(self.reread.wait())}
        try:
            await asyncio.wait(waits, timeout=interval_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        if self.stop.is_set():
            return None
        asked = self.reread.is_set()
        self.reread.clear()
        return asked


# What starts and checks a release (start_release), and what checks this host can start
# its server (preflight's require_ready): parameters, so that tests can run the loop
# without a server.
Starter = Callable[[Store, Manifest, LoadedSpec, Path, Mapping[str, str], Fleet],
                   HostedRelease]
Preflight = Callable[[LoadedSpec, Mapping[str, str], Scope], object]


class Host:
    def __init__(self, settings: HostSettings, start: Starter = start_release,
                 preflight: Preflight = require_ready) -> None:
        self.settings = settings
        self._start_release = start
        self._require_ready = preflight
        self.name = settings.here.spec.name
        self.fleet = Fleet()
        self.signals = Signals()
        self.serving: HostedRelease | None = None
        self.watch: PointerWatch | None = None
        self.swaps: list[dict[str, str]] = []
        self.started_at = iso(utc_now())
        self.proxy: ReverseProxy | None = None
        self.upstreams: list[Upstream] = []

    def status(self) -> dict[str, Any]:
        """What `GET /serve-pipeline/status` answers."""
        serving = self.serving
        upstream = self.proxy.upstream if self.proxy is not None else None
        return {"name": self.name, "environment": self.settings.environment,
                "store": self.settings.store.url, "started_at": self.started_at,
                "release_id": serving.release_id if serving else None,
                "upstream": upstream.base_url if upstream else None,
                "in_flight": upstream.in_flight if upstream else 0,
                "swaps": list(self.swaps),
                "refused": dict(self.watch.refused) if self.watch else {}}

    async def run(self) -> None:
        """Serve until SIGTERM or Ctrl-C; a PipelineError when the first release cannot be
        served. Everything started is stopped either way."""
        loop = asyncio.get_running_loop()
        self.signals.install(loop)
        try:
            await self._serve()
        finally:
            await self._shutdown()
            self.signals.remove(loop)

    async def _serve(self) -> None:
        settings = self.settings
        manifest = await asyncio.to_thread(deployable_release, settings.store, settings.here,
                                           settings.environment)
        loaded = await asyncio.to_thread(self._preflight, manifest)
        # A port that is taken is said before the release starts (a large model takes
        # minutes), not after; the bind itself below still says it if it is taken since.
        wanted = settings.port if settings.port is not None else stable_port(loaded)
        if wanted and _taken(settings.listen, wanted):
            raise UsageError(f"--port {wanted}: cannot listen on {settings.listen}:{wanted} "
                             f"(held by {port_holder(wanted)}): stop it, or pass another "
                             "--port")
        try:
            first = await self._start(manifest)
        except LiveUnservable as exc:
            raise self._refusal(manifest, exc) from None
        if first is None:
            return
        port = settings.port if settings.port is not None else stable_port(first.loaded)
        self.proxy = ReverseProxy(settings.listen, port, self.status)
        self._switch(first)
        try:
            await self.proxy.start()
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                # Not the port's fault: an address that does not resolve or is not this
                # host's (gaierror, EADDRNOTAVAIL).
                raise UsageError(f"--listen {settings.listen}: cannot listen there "
                                 f"({exc.strerror or exc}): give an address of this host, "
                                 "e.g. 127.0.0.1 or 0.0.0.0") from None
            raise UsageError(f"--port {port}: cannot listen on {settings.listen}:{port} "
                             f"({exc.strerror}; held by {port_holder(port)}): stop it, or "
                             "pass another --port") from None
        where = f"http://{settings.listen}:{self.proxy.port}"
        settings.say(f"serving release {first.release_id} of '{self.name}' "
                     f"({settings.environment}) on {where} (status: {where}{STATUS_PATH})")
        following = asyncio.ensure_future(self._follow())
        watching = asyncio.ensure_future(self._watch_serving())
        try:
            done, _ = await asyncio.wait({following, watching},
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (following, watching):
                task.cancel()
            await asyncio.gather(following, watching, return_exceptions=True)
        for task in done:
            task.result()                  # the server's death, raised

    async def _watch_serving(self) -> None:
        """Raise ServerError when the server of the release being served stops (a kill, a
        crash): the host says so and stops, for its supervisor (systemd, Kubernetes) to
        restart it, rather than answer 502 to every request while it looks alive."""
        while True:
            await asyncio.sleep(WATCH_S)
            serving = self.serving
            if serving is None or await asyncio.to_thread(serving.server.alive):
                continue
            if self.serving is not serving:         # swapped away meanwhile: retired
                continue
            death = await asyncio.to_thread(serving.server.describe_death)
            raise ServerError(f"release {serving.release_id}: its server stopped: {death}; "
                              "the host stops (a supervisor that restarts it, as systemd "
                              "or Kubernetes do, serves the release again)")

    def _preflight(self, manifest: Manifest) -> LoadedSpec:
        """The checks a run that starts the release's server makes, before anything starts;
        the release's own spec."""
        settings = self.settings
        try:
            loaded = live_spec(settings.store, manifest, settings.here)
        except LiveUnservable as exc:
            raise self._refusal(manifest, exc) from None
        self._require_ready(loaded, settings.env, Scope(environment=settings.environment,
                                                  starts_server=True, reads_source=False,
                                                  publishes=False))
        return loaded

    def _refusal(self, manifest: Manifest, exc: LiveUnservable) -> PipelineError:
        where = f"release {manifest.release_id} of '{self.name}'"
        if isinstance(exc, IntegrityFailed):
            return StoreError(f"{where} in {self.settings.store.url}: {exc}")
        return ServerError(f"{where} (environment {self.settings.environment}) cannot be "
                           f"served here: {exc}")

    async def _follow(self) -> None:
        """Re-read the pointer until the host is to stop; swap when it moved."""
        assert self.watch is not None
        while True:
            asked = await self.signals.next_read(self.settings.interval_s)
            if asked is None:
                return
            read = await asyncio.to_thread(self._read_pointer)
            step = self.watch.step(read, asked)
            if isinstance(step, Keep):
                if step.say:
                    self.settings.say(step.say)
                continue
            await self._swap_to(step.release_id)

    def _read_pointer(self) -> PointerRead:
        try:
            pointer, _ = read_pointer(self.settings.store, self.name, self.settings.environment)
        except PipelineError as exc:
            return PointerRead(None, first_line(exc))
        return PointerRead(pointer.current)

    async def _start(self, manifest: Manifest) -> HostedRelease | None:
        """The release started and checked (in a worker thread); None when the host was
        told to stop meanwhile (what it started is stopped)."""
        settings = self.settings
        settings.folder.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f"{manifest.release_id}-", dir=settings.folder))
        starting = asyncio.ensure_future(asyncio.to_thread(
            self._start_release, settings.store, manifest, settings.here, folder, settings.env,
            self.fleet))
        try:
            started = await self._unless_stopped(asyncio.shield(starting))
        except BaseException:
            # Refused here (its server already stopped): its logs and parity record stay.
            await asyncio.to_thread(keep_only_records, folder)
            raise
        if started is not None:
            return started
        await asyncio.to_thread(self.fleet.stop_all)
        with contextlib.suppress(Exception):
            await starting
        await asyncio.to_thread(keep_only_records, folder)
        return None

    async def _unless_stopped(self, work: Awaitable[_Result]) -> _Result | None:
        """`work`'s result, or None when the host is told to stop first."""
        task = asyncio.ensure_future(work)
        stopping = asyncio.ensure_future(self.signals.stop.wait())
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if task.done():
            return task.result()
        task.cancel()
        return None

    async def _swap_to(self, release_id: str) -> None:
        settings, watch, old = self.settings, self.watch, self.serving
        assert watch is not None and old is not None
        settings.say(f"environment {settings.environment} is on {release_id} now: starting it "
                     f"beside {old.release_id}")
        try:
            manifest = await asyncio.to_thread(deployable_in, settings.store, settings.here,
                                               settings.environment, release_id)
            candidate = await self._start(manifest)
        except (LiveUnservable, PipelineError) as exc:
            settings.say(watch.refuse(release_id, first_line(exc)))
            return
        if candidate is None:
            return
        previous = self._switch(candidate)
        watch.swapped(release_id)
        self.swaps.append({"from": old.release_id, "to": release_id, "at": iso(utc_now())})
        settings.say(f"switched to {release_id}; draining {old.release_id}")
        if previous is not None:
            drained = await self._unless_stopped(previous.drained(DRAIN_TIMEOUT_S))
            if drained is False:
                settings.say(f"{previous.in_flight} requests still on {old.release_id} after "
                             f"{DRAIN_TIMEOUT_S:g}s: stopping it anyway")
            await previous.close()
            self.upstreams.remove(previous)
        await asyncio.to_thread(self.fleet.retire, old.server)
        await asyncio.to_thread(keep_only_records, old.folder)
        settings.say(f"stopped {old.release_id}")

    def _switch(self, release: HostedRelease) -> Upstream | None:
        assert self.proxy is not None
        upstream = Upstream(release.release_id, release.base_url)
        self.upstreams.append(upstream)
        self.serving = release
        if self.watch is None:
            self.watch = PointerWatch(self.settings.environment, release.release_id)
        return self.proxy.switch(upstream)

    async def _shutdown(self) -> None:
        """Stop listening (requests in flight finish), then stop every server started."""
        if self.proxy is not None:
            await self.proxy.close()
        for upstream in self.upstreams:
            await upstream.close()
        self.upstreams.clear()
        await asyncio.to_thread(self.fleet.stop_all)
        if self.serving is not None:
            await asyncio.to_thread(keep_only_records, self.serving.folder)


def serve_environment(settings: HostSettings) -> None:
    """Serve `settings.environment` on this host until SIGTERM or Ctrl-C."""
    asyncio.run(Host(settings).run())
