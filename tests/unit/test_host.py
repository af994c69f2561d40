"""`serve`'s loop and proxy without a model server: releases of the example in a local store,
each "started" as an in-process HTTP server that answers with its release id. The loop, the
pointer reads, the proxy, the swaps, the drain and the refusals are the real ones (the
real start, against tritonserver: tests/integration/test_serve_host.py)."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import web

from pipeline.cli.app import main
from pipeline.errors import ServerError, StoreError, UsageError
from pipeline.host.host import Host, HostSettings, stable_port
from pipeline.host.hosted import Fleet, HostedRelease, start_release
from pipeline.host.proxy import RELEASE_HEADER, STATUS_PATH
from pipeline.regression.live_serving import IntegrityFailed, LiveUnservable, live_spec
from pipeline.release.manifest_record import Manifest
from pipeline.release.pointer_event import PointerAction
from pipeline.release.pointers import move_pointer
from pipeline.release.store.base import Store
from pipeline.servers.base import ModelServer
from pipeline.servers.specs import load_spec
from pipeline.spec.models import LoadedSpec
from tests.support.example_releases import ExampleRelease, publish_example

ENVIRONMENT = "staging"


@dataclass
class FakeServer:
    """What the fleet stops; when it was stopped."""

    release_id: str
    stopped_at: float | None = None
    killed: bool = False

    def stop(self) -> None:
        if self.stopped_at is None:
            self.stopped_at = time.monotonic()

    def alive(self) -> bool:
        return not self.killed

    def describe_death(self) -> str:
        return "tritonserver killed by SIGKILL; last log lines: ..."


@dataclass
class Backends:
    """One in-process HTTP server per release id; `/slow` answers after `slow_s`."""

    urls: dict[str, str] = field(default_factory=dict)
    runners: list[web.AppRunner] = field(default_factory=list)
    slow_s: float = 0.6
    slow_answered: float | None = None

    async def add(self, release_id: str) -> None:
        async def answer(request: web.Request) -> web.Response:
            if request.path == "/slow":
                await asyncio.sleep(self.slow_s)
                self.slow_answered = time.monotonic()
            body = await request.read()
            return web.json_response({"release": release_id, "path": request.path_qs,
                                      "method": request.method, "bytes": len(body),
                                      "encodings": request.headers.get("Accept-Encoding")},
                                     headers={"X-Upstream": "yes"})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self.runners.append(runner)
        self.urls[release_id] = f"http://127.0.0.1:{runner.addresses[0][1]}"

    async def close(self) -> None:
        for runner in self.runners:
            await runner.cleanup()


@dataclass
class FakeStarts:
    """A starter for Host: the release's backend, or the reason it is refused."""

    backends: Backends
    refuse: dict[str, LiveUnservable] = field(default_factory=dict)
    servers: list[FakeServer] = field(default_factory=list)
    started: list[str] = field(default_factory=list)

    def __call__(self, store: Store, manifest: Manifest, here: LoadedSpec, folder: Path,
                 env: Mapping[str, str], fleet: Fleet) -> HostedRelease:
        release_id = manifest.release_id
        self.started.append(release_id)
        if release_id in self.refuse:
            raise self.refuse[release_id]
        server = FakeServer(release_id)
        fleet.adopt(cast(ModelServer, server))
        self.servers.append(server)
        return HostedRelease(release_id, live_spec(store, manifest, here),
                             cast(ModelServer, server), self.backends.urls[release_id], folder)


@pytest.fixture
def releases(project: Path, tmp_path: Path) -> tuple[ExampleRelease, ExampleRelease]:
    store_root = project / ".serve-pipeline" / "store"
    first = publish_example(project / "serve.yaml", store_root, tmp_path / "one",
                            environment=ENVIRONMENT)
    second = publish_example(project / "serve.yaml", store_root, tmp_path / "two",
                             environment=None)
    return first, second


def settings_for(release: ExampleRelease, project: Path, said: list[str]) -> HostSettings:
    return HostSettings(store=release.store, environment=ENVIRONMENT,
                        here=load_spec(project / "serve.yaml", ENVIRONMENT),
                        listen="127.0.0.1", port=0, interval_s=0.05,
                        folder=project / ".serve-pipeline" / "serve" / ENVIRONMENT, env={},
                        say=said.append)


def no_preflight(*_: object) -> None:
    """Preflight looks for tritonserver (a process): not in the unit suite."""


async def until(condition: Callable[[], Awaitable[bool] | bool],
                timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = condition()
        if await got if isinstance(got, Awaitable) else got:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


async def served_by(client: aiohttp.ClientSession, host: Host) -> str:
    assert host.proxy is not None
    async with client.get(f"http://127.0.0.1:{host.proxy.port}/v2/health/ready") as reply:
        assert reply.status == 200
        return reply.headers[RELEASE_HEADER]


def running(host: Host) -> asyncio.Task[None]:
    return asyncio.ensure_future(host.run())


async def started(host: Host, task: asyncio.Task[None]) -> int:
    await until(lambda: task.done() or (host.proxy is not None and host.proxy.port != 0))
    if task.done():
        task.result()
    assert host.proxy is not None
    return host.proxy.port


async def backends_for(releases: tuple[ExampleRelease, ...]) -> Backends:
    """In-process upstreams, one per release."""
    backends = Backends()
    for release in releases:
        await backends.add(release.release_id)
    return backends


def move(release: ExampleRelease, to: str, action: PointerAction) -> None:
    move_pointer(release.store, release.loaded.spec.name, ENVIRONMENT, to, action, "alice")


def test_a_promotion_and_a_rollback_swap_the_served_release(
        releases: tuple[ExampleRelease, ExampleRelease], project: Path) -> None:
    first, second = releases
    said: list[str] = []

    async def scenario() -> None:
        backends = await backends_for(releases)
        starts = FakeStarts(backends)
        host = Host(settings_for(first, project, said), start=starts, preflight=no_preflight)
        task = running(host)
        port = await started(host, task)
        async with aiohttp.ClientSession(skip_auto_headers=("Accept-Encoding",)) as client:
            assert await served_by(client, host) == first.release_id
            async with client.post(f"http://127.0.0.1:{port}/v2/models/m/infer?x=1",
                                   data=b"\x00" * 1000) as reply:
                body = await reply.json()
                assert reply.headers["X-Upstream"] == "yes"
            # The client's request as it sent it: no encoding it did not ask for.
            assert body == {"release": first.release_id, "path": "/v2/models/m/infer?x=1",
                            "method": "POST", "bytes": 1000, "encodings": None}
            # A request in flight on the old release when the pointer moves ends there.
            slow = asyncio.ensure_future(client.get(f"http://127.0.0.1:{port}/slow"))
            await until(lambda: host.proxy is not None and host.proxy.upstream is not None
                        and host.proxy.upstream.in_flight == 1)
            move(first, second.release_id, PointerAction.PROMOTE)
            await until(lambda: _is(client, host, second.release_id))
            reply = await slow
            assert reply.status == 200 and reply.headers[RELEASE_HEADER] == first.release_id
            await until(lambda: starts.servers[0].stopped_at is not None)
            stopped_at, answered = starts.servers[0].stopped_at, backends.slow_answered
            assert stopped_at is not None and answered is not None and stopped_at > answered
            move(first, first.release_id, PointerAction.ROLLBACK)
            await until(lambda: _is(client, host, first.release_id))
            async with client.get(f"http://127.0.0.1:{port}{STATUS_PATH}") as reply:
                status = await reply.json()
        host.signals.stop.set()
        await task
        await backends.close()
        assert status["release_id"] == first.release_id
        assert status["environment"] == ENVIRONMENT
        assert [(s["from"], s["to"]) for s in status["swaps"]] == [
            (first.release_id, second.release_id), (second.release_id, first.release_id)]
        assert starts.started == [first.release_id, second.release_id, first.release_id]
        assert all(server.stopped_at is not None for server in starts.servers)

    asyncio.run(scenario())
    assert said[0].startswith(f"serving release {first.release_id} of 'fraud-mlp' (staging) "
                              "on http://127.0.0.1:")
    assert f"switched to {second.release_id}; draining {first.release_id}" in said
    assert f"switched to {first.release_id}; draining {second.release_id}" in said


async def _is(client: aiohttp.ClientSession, host: Host, release_id: str) -> bool:
    return await served_by(client, host) == release_id


def test_a_release_that_fails_here_is_never_switched_to(
        releases: tuple[ExampleRelease, ExampleRelease], project: Path) -> None:
    first, second = releases
    said: list[str] = []

    async def scenario() -> None:
        backends = await backends_for(releases)
        starts = FakeStarts(backends, refuse={second.release_id: LiveUnservable(
            "parity failed: 12 of 80 output values outside atol 1e-05")})
        host = Host(settings_for(first, project, said), start=starts, preflight=no_preflight)
        task = running(host)
        await started(host, task)
        async with aiohttp.ClientSession() as client:
            move(first, second.release_id, PointerAction.PROMOTE)
            await until(lambda: second.release_id in starts.started)
            # Many intervals later: not started again, the first still serves.
            await asyncio.sleep(0.5)
            assert starts.started.count(second.release_id) == 1
            assert await served_by(client, host) == first.release_id
            # A re-read asked for (SIGHUP) tries it once more.
            host.signals.reread.set()
            await until(lambda: starts.started.count(second.release_id) == 2)
            assert await served_by(client, host) == first.release_id
        host.signals.stop.set()
        await task
        await backends.close()
        assert host.status()["refused"] == {
            second.release_id: "parity failed: 12 of 80 output values outside atol 1e-05"}

    asyncio.run(scenario())
    refusal = (f"release {second.release_id} not served: parity failed: 12 of 80 output "
               f"values outside atol 1e-05; still serving {first.release_id}")
    assert said.count(refusal) == 2


def test_stopping_while_a_release_starts_stops_it_too(
        releases: tuple[ExampleRelease, ExampleRelease], project: Path) -> None:
    first, second = releases
    entered, release = threading.Event(), threading.Event()

    class SlowStarts(FakeStarts):
        def __call__(self, store: Store, manifest: Manifest, here: LoadedSpec, folder: Path,
                     env: Mapping[str, str], fleet: Fleet) -> HostedRelease:
            if manifest.release_id == second.release_id:
                entered.set()
                release.wait(10)      # as a server's readiness wait, ended by its stop
            return super().__call__(store, manifest, here, folder, env, fleet)

    async def scenario() -> FakeStarts:
        backends = Backends()
        for one in releases:
            await backends.add(one.release_id)
        starts = SlowStarts(backends)
        host = Host(settings_for(first, project, []), start=starts, preflight=no_preflight)
        task = running(host)
        await started(host, task)
        move(first, second.release_id, PointerAction.PROMOTE)
        await until(entered.is_set)
        host.signals.stop.set()
        await asyncio.sleep(0.1)
        release.set()
        await asyncio.wait_for(task, 10)
        await backends.close()
        return starts

    starts = asyncio.run(scenario())
    # The second one reached the fleet after it had closed: refused, nothing left running.
    assert [server.release_id for server in starts.servers] == [first.release_id]
    assert starts.servers[0].stopped_at is not None


@pytest.mark.parametrize(("reason", "error", "message"), [
    (IntegrityFailed("integrity check failed: model: sha256 mismatch"), StoreError,
     "release {id} of 'fraud-mlp' in file://{store}: integrity check failed: model: sha256 "
     "mismatch"),
    (LiveUnservable("not ready: tritonserver died before it was ready: exited with code 1"),
     ServerError, "release {id} of 'fraud-mlp' (environment staging) cannot be served here: "
     "not ready: tritonserver died before it was ready: exited with code 1")])
def test_a_first_release_that_cannot_be_served_is_one_error(
        releases: tuple[ExampleRelease, ExampleRelease], project: Path,
        reason: LiveUnservable, error: type[Exception], message: str) -> None:
    first, _ = releases

    async def scenario() -> None:
        starts = FakeStarts(Backends(), refuse={first.release_id: reason})
        await Host(settings_for(first, project, []), start=starts,
                   preflight=no_preflight).run()

    with pytest.raises(error) as raised:
        asyncio.run(scenario())
    assert str(raised.value) == message.format(id=first.release_id, store=first.store.root)


def test_an_environment_without_a_live_release_is_one_error(
        releases: tuple[ExampleRelease, ExampleRelease], project: Path) -> None:
    first, _ = releases
    settings = settings_for(first, project, [])
    settings = HostSettings(**{**settings.__dict__, "environment": "production"})
    with pytest.raises(UsageError, match=r"^environment production of 'fraud-mlp' has no live "
                                         r"release in file://"):
        asyncio.run(Host(settings, start=FakeStarts(Backends()), preflight=no_preflight).run())


def test_a_release_whose_blobs_fail_their_check_starts_nothing(
        releases: tuple[ExampleRelease, ExampleRelease], project: Path,
        tmp_path: Path) -> None:
    first, _ = releases
    first.blob_path("model").write_bytes(b"not the model")
    with pytest.raises(IntegrityFailed, match="integrity check failed: model: "):
        start_release(first.store, first.manifest, load_spec(project / "serve.yaml", None),
                      tmp_path / "served", {}, Fleet())
    assert not (tmp_path / "served").exists()


def test_the_stable_port_defaults_to_the_production_http_port(project: Path) -> None:
    loaded = load_spec(project / "serve.yaml", None)
    assert stable_port(loaded) == 8000
    torchserve = load_spec(project / "examples" / "torchserve" / "serve.yaml", None)
    assert stable_port(torchserve) == 8080


def test_an_upstream_that_does_not_answer_is_a_502(
        releases: tuple[ExampleRelease, ExampleRelease], project: Path) -> None:
    first, _ = releases

    async def scenario() -> tuple[int, dict[str, Any], str]:
        backends = Backends()
        await backends.add(first.release_id)
        starts = FakeStarts(backends)
        host = Host(settings_for(first, project, []), start=starts, preflight=no_preflight)
        task = running(host)
        port = await started(host, task)
        await backends.close()
        async with aiohttp.ClientSession() as client, \
                client.get(f"http://127.0.0.1:{port}/v2/health/ready") as reply:
            answer = (reply.status, await reply.json(), reply.headers[RELEASE_HEADER])
        host.signals.stop.set()
        await task
        return answer

    status, body, header = asyncio.run(scenario())
    assert status == 502 and header == first.release_id
    assert body["error"].startswith(f"release {first.release_id} did not answer: ")


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        main(argv)
        raise SystemExit(0)
    return int(exited.value.code or 0), capsys.readouterr().err


def test_serve_names_a_missing_live_release_in_one_line(
        releases: tuple[ExampleRelease, ExampleRelease],
        capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli(["serve", "production"], capsys)
    assert (code, err.splitlines()) == (2, [
        "error: environment production of 'fraud-mlp' has no live release in "
        "file://.serve-pipeline/store"])


def test_serve_names_a_corrupt_blob_in_one_line_and_leaves_nothing(
        releases: tuple[ExampleRelease, ExampleRelease], project: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    first, _ = releases
    first.blob_path("model").write_bytes(b"not the model")
    code, err = run_cli(["serve", "staging"], capsys)
    assert code == 3
    assert err.splitlines() == [
        f"error: release {first.release_id} of 'fraud-mlp' in file://.serve-pipeline/store: "
        f"integrity check failed: model: blob {str(first.manifest.model_sha256)[:12]} is corrupt "
        f"(sha256 {hashlib.sha256(b'not the model').hexdigest()[:12]})"]
    assert list((project / ".serve-pipeline" / "serve" / "staging").iterdir()) == []


def test_a_served_release_whose_server_dies_stops_the_host_saying_so(
        releases: tuple[ExampleRelease, ExampleRelease], project: Path) -> None:
    """A kill of the server behind the proxy: the host says so and stops (its supervisor
    restarts it), rather than answer 502 forever while its status says all is well."""
    first, _ = releases

    async def scenario() -> tuple[BaseException | None, FakeStarts]:
        backends = Backends()
        await backends.add(first.release_id)
        starts = FakeStarts(backends)
        host = Host(settings_for(first, project, []), start=starts, preflight=no_preflight)
        task = running(host)
        await started(host, task)
        starts.servers[0].killed = True
        try:
            await asyncio.wait_for(task, 10)
            failure: BaseException | None = None
        except ServerError as exc:
            failure = exc
        await backends.close()
        return failure, starts

    failure, starts = asyncio.run(scenario())
    assert failure is not None and str(failure).startswith(
        f"release {first.release_id}: its server stopped: tritonserver killed by SIGKILL")
    assert all(server.stopped_at is not None for server in starts.servers)


def test_a_taken_port_is_said_before_any_release_starts(
        releases: tuple[ExampleRelease, ExampleRelease], project: Path) -> None:
    first, _ = releases
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        settings = replace(settings_for(first, project, []), port=port)

        async def scenario() -> FakeStarts:
            backends = Backends()
            starts = FakeStarts(backends)
            with pytest.raises(UsageError, match=f"--port {port}: cannot listen on "
                                                 f"127.0.0.1:{port} \\(held by process"):
                await Host(settings, start=starts, preflight=no_preflight).run()
            await backends.close()
            return starts

        assert asyncio.run(scenario()).started == []      # nothing was started


def test_a_stopped_releases_folder_keeps_its_logs_and_parity_record(tmp_path: Path) -> None:
    from pipeline.host.hosted import keep_only_records

    folder = tmp_path / "20261207T000000Z-abcdef12-x1"
    for name in ("artifact", "model.pt", "model-repository/m/1/model.pt",
                 "server/serving-repository/m/1/model.pt", "server/server.log",
                 "server/torchserve/logs/model_log.log", "parity/record.json"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x")
    keep_only_records(folder)
    kept = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert kept == ["parity/record.json", "server/server.log",
                    "server/torchserve/logs/model_log.log"]
    assert not (folder / "model-repository").exists()
