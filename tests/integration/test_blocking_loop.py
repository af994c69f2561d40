"""The closed loop at low concurrency (blocking sockets in threads) against real Triton:
the same outcomes and error kinds as the event-loop path, and a stop that ends it
promptly, even in the middle of a stalled call."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator

import numpy as np
import pytest

from benchmarks.stall_scenario import StallScenario
from pipeline.measure.loadgen import LoadAborted, LoadResult, Target, closed_loop
from pipeline.measure.wire.blocking import HTTP_THREADS_UP_TO, blocking_callers
from pipeline.model.tensors import Batch
from pipeline.request_types import GrpcRequest, HttpRequest
from pipeline.servers.base import ModelServer
from pipeline.servers.ports import free_ports
from pipeline.servers.triton.server import TritonServer
from pipeline.spec.models import LoadedSpec
from tests.integration.test_measurement import one_item, served_example

pytestmark = pytest.mark.integration
STALL = StallScenario(every=2, stall_s=0.6)


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ModelServer, LoadedSpec]]:
    yield from served_example("serve.yaml.example", tmp_path_factory.mktemp("triton"))


@pytest.fixture(scope="module")
def stalling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    with STALL.serving(tmp_path_factory.mktemp("stall")) as server:
        yield server


def target_for(server: ModelServer, protocol: str, batch: Batch) -> Target:
    target = server.grpc_request(batch) if protocol == "grpc" else server.infer_request(batch)
    assert target is not None
    return target


def both_paths(target: Target, duration_s: float, timeout_s: float
               ) -> tuple[LoadResult, LoadResult]:
    """(concurrency 1: a blocking caller, past the threads' range: the event loop)."""
    beyond = HTTP_THREADS_UP_TO + 1
    assert blocking_callers(target, 1) is not None and blocking_callers(target, beyond) is None
    return (asyncio.run(closed_loop(target, 1, duration_s, timeout_s)),
            asyncio.run(closed_loop(target, beyond, duration_s, timeout_s)))


def unknown_model(target: Target, name: str) -> Target:
    if isinstance(target, HttpRequest):
        return dataclasses.replace(target, url=target.url.replace(f"/{name}/", "/nosuch/"))
    assert isinstance(target, GrpcRequest)
    return dataclasses.replace(target, payload=target.payload.replace(
        name.encode(), b"x" * len(name), 1))


def closed_port(target: Target) -> Target:
    port = free_ports(1)[0]
    if isinstance(target, HttpRequest):
        return dataclasses.replace(target, url=target.url.replace(
            target.url.split("/")[2], f"127.0.0.1:{port}"))
    assert isinstance(target, GrpcRequest)
    return dataclasses.replace(target, target=f"127.0.0.1:{port}")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_one_blocking_worker_counts_as_the_event_loop_does(
        triton: tuple[ModelServer, LoadedSpec], protocol: str) -> None:
    server, loaded = triton
    item = one_item(server, loaded)
    good = target_for(server, protocol, item)
    before = server.stats()
    single, _ = both_paths(good, 0.5, 10.0)
    assert single.completed > 20 and single.error_count == 0
    assert server.stats().since(before).window_metrics()["server_requests"] >= single.completed
    assert single.client_cpu_s > 0 and 0 < single.percentile_ms(50) < single.percentile_ms(99)
    wrong_shape = target_for(server, protocol, {
        name: np.concatenate([array, array[:, :1]], axis=1) for name, array in item.items()})
    for bad in (wrong_shape, unknown_model(good, server.model_name), closed_port(good)):
        single, multiple = both_paths(bad, 0.3, 10.0)
        assert single.completed == 0 and single.error_count > 0
        assert set(single.errors) == set(multiple.errors), bad
    assert set(single.errors) == {"connection"}


@pytest.mark.parametrize("concurrency", [1, HTTP_THREADS_UP_TO])
def test_a_stop_interrupts_a_stalled_call(stalling: TritonServer, concurrency: int) -> None:
    target = stalling.infer_request({"x": np.ones((1, 1), dtype=np.float32)})
    assert blocking_callers(target, concurrency) is not None
    started = time.perf_counter()
    with pytest.raises(LoadAborted):
        asyncio.run(closed_loop(target, concurrency, 30.0, 10.0,
                                should_stop=lambda: time.perf_counter() - started > 0.2))
    # A call stalls for 0.6 s (the second, or one queued behind it); the watchdog looks
    # every 0.1 s.
    assert time.perf_counter() - started < 0.45


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_call_past_its_timeout_counts_as_a_timeout(stalling: TritonServer,
                                                      protocol: str) -> None:
    target = target_for(stalling, protocol, {"x": np.ones((1, 1), dtype=np.float32)})
    single, multiple = both_paths(target, 0.3, 0.2)
    assert set(single.errors) == set(multiple.errors) == {"timeout"}
    assert single.percentile_ms(99) >= 200         # censored at the timeout
