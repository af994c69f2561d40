"""Latency verdicts on a real Triton: a clear pass, a threshold near the measured p99,
and thresholds far below what the server can do (short windows throughout)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import LoadedSpec, Spec, load_spec
from pipeline.context import RunContext
from pipeline.results import Gate, StageResult, Status
from pipeline.servers.base import ModelServer
from pipeline.servers.triton import TritonKind
from stages import latency

from .test_measurement import REPO, started

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ModelServer, LoadedSpec]]:
    loaded = load_spec(REPO / "serve.yaml.example")
    server = started(TritonKind(), loaded, REPO / "examples/mlp/model.pt",
                     tmp_path_factory.mktemp("triton"))
    yield server, loaded
    server.stop()


def measure(triton: tuple[ModelServer, LoadedSpec], tmp_path: Path, slo: dict[str, Any],
            max_windows: int = 3, **verdict: Any) -> StageResult:
    server, loaded = triton
    body = loaded.spec.model_dump(mode="json")
    body["slo"].update(slo)
    body["stages"]["latency"].update(
        concurrency=4, warmup="300ms", duration=f"{400 * max_windows}ms",
        stability={"windows": 2, "max_windows": max_windows}, verdict=verdict)
    spec = Spec.model_validate(body)
    with ExitStack() as resources:
        ctx = RunContext(dataclasses.replace(loaded, spec=spec), "test", tmp_path, {},
                         resources, server=server)
        return latency.run(ctx)


def gate(result: StageResult, name: str) -> Gate:
    return next(g for g in result.gates if g.name == name)


def test_a_clear_margin_passes_after_the_fewest_windows(
        triton: tuple[ModelServer, LoadedSpec], tmp_path: Path) -> None:
    result = measure(triton, tmp_path, {"p99": "2s", "p95": None, "queue_mean": "1s"},
                     max_windows=6)
    p99 = gate(result, "latency.p99")
    assert result.status is Status.PASSED, result.message
    assert p99.outcome == "passed" and p99.samples == result.metrics["latency_samples"]
    assert p99.interval is not None and p99.interval[1] is not None
    assert p99.interval[0] is not None and p99.interval[0] <= p99.observed <= p99.interval[1]
    assert result.metrics["windows"] == 2          # decided at the fewest windows
    assert gate(result, "latency.server_queue_mean").outcome == "passed"


def test_far_below_the_server_fails_p99_and_the_queue_mean(
        triton: tuple[ModelServer, LoadedSpec], tmp_path: Path) -> None:
    result = measure(triton, tmp_path, {"p99": "50us", "p95": None, "queue_mean": "1us"})
    p99 = gate(result, "latency.p99")
    assert result.status is Status.FAILED
    assert p99.outcome == "failed" and p99.interval is not None
    assert p99.interval[0] is not None and p99.interval[0] > 0.05
    assert result.metrics["windows"] == 2          # a clear failure stops early too
    queue = gate(result, "latency.server_queue_mean")
    assert queue.outcome == "failed" and isinstance(queue.observed, float)
    assert queue.observed > 0.001


def test_a_threshold_at_the_measured_p99_is_definite_or_inconclusive(
        triton: tuple[ModelServer, LoadedSpec], tmp_path: Path) -> None:
    first = gate(measure(triton, tmp_path, {"p99": "2s", "p95": None}), "latency.p99")
    assert isinstance(first.observed, float)
    near = f"{round(first.observed * 1000)}us"
    for accept in (False, True):
        result = measure(triton, tmp_path, {"p99": near, "p95": None},
                         accept_inconclusive=accept)
        p99 = gate(result, "latency.p99")
        assert p99.interval is not None and p99.samples
        low, high = p99.interval
        windows = result.details["verdicts"]["latency.p99"]["window_ms"]
        threshold = float(p99.threshold)
        if p99.outcome == "passed":
            assert high is not None and high <= threshold and max(windows) <= threshold
        elif p99.outcome == "failed":
            assert low is not None and low > threshold and min(windows) > threshold
            assert result.status is Status.FAILED
        else:
            assert p99.reason and result.metrics["windows"] == 3      # ran to the cap
            assert result.status is (Status.PASSED if accept else Status.FAILED)
            assert "inconclusive" in result.message.lower()
