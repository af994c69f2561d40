"""The replay stage on real servers (Triton and TorchServe): a request log sent at its own
arrival times, on one process and on 2 Ray workers, judged by the SLO's gates, each of
which fails on its threshold; and a log that does not match the spec refused at validate.

Short logs throughout (2 s at 200/s, examples/mlp/replay.jsonl): these tests are about the
replay, not about the server's speed; thresholds far from the measured values decide."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from pipeline.context import RunContext
from pipeline.servers.base import ModelServer
from pipeline.servers.specs import validate_spec
from pipeline.spec.models import LoadedSpec
from pipeline.stage_result import Gate, StageResult, Status
from stages import replay

from .test_measurement import served_example

pytestmark = pytest.mark.integration

LOG = "examples/mlp/replay.jsonl"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ModelServer, LoadedSpec]]:
    yield from served_example("serve.yaml.example", tmp_path_factory.mktemp("triton"))


@pytest.fixture(scope="module")
def torchserve(tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[tuple[ModelServer, LoadedSpec]]:
    yield from served_example("examples/torchserve/serve.yaml", tmp_path_factory.mktemp("ts"))


def replayed(served: tuple[ModelServer, LoadedSpec], tmp_path: Path, slo: dict[str, Any],
             log: str | Path = REPO / LOG, **settings: Any) -> StageResult:
    server, loaded = served
    body = loaded.spec.model_dump(mode="json")
    body["slo"].update({"error_rate": "5%", **slo})
    body["stages"]["replay"] = {"log": str(log), **settings}
    # Short logs: a percentile still undecided but within its threshold passes.
    body["stages"]["latency"]["verdict"] = {"accept_inconclusive": True}
    spec = validate_spec(body)
    with ExitStack() as resources:
        ctx = RunContext(dataclasses.replace(loaded, spec=spec), "test", tmp_path, {},
                         resources, server=server)
        return replay.run(ctx)


def gate(result: StageResult, name: str) -> Gate:
    return next(g for g in result.gates if g.name == name)


def logged_requests() -> int:
    return sum(1 for line in (REPO / LOG).read_text().splitlines() if line.strip())


def check_a_pass(result: StageResult) -> None:
    assert result.status is Status.PASSED, result.message
    assert {g.name for g in result.gates} >= {"replay.p99", "replay.error_rate"}
    assert result.metrics["requests"] == logged_requests()
    assert result.metrics["errors"] == 0
    over_time = result.details["over_time"]
    assert len(over_time) >= 10 and sum(row["offered_rps"] for row in over_time) * \
        result.details["bucket_s"] == logged_requests()
    assert all(row["p99_ms"] > 0 for row in over_time)


def test_a_log_replays_on_triton_and_passes_a_clear_slo(
        triton: tuple[ModelServer, LoadedSpec], tmp_path: Path) -> None:
    result = replayed(triton, tmp_path, {"p99": "2s", "p95": "2s"})
    check_a_pass(result)
    assert result.details["payloads"] == "log"
    assert result.metrics["schedule_lag_p99_ms"] < 20


def test_a_log_replays_from_two_ray_workers(
        triton: tuple[ModelServer, LoadedSpec], tmp_path: Path) -> None:
    result = replayed(triton, tmp_path, {"p99": "2s", "p95": "2s"}, workers=2)
    check_a_pass(result)
    rows = result.details["load_workers"]
    assert len(rows) == 2
    # Each worker sent its share (rows count the warm-up too, as the latency stage's do).
    assert all(row["requests"] > logged_requests() // 2 for row in rows), rows


def test_replay_p99_fails_on_its_threshold(
        triton: tuple[ModelServer, LoadedSpec], tmp_path: Path) -> None:
    result = replayed(triton, tmp_path, {"p99": "10us", "p95": "10us"})
    assert result.status is Status.FAILED
    assert gate(result, "replay.p99").outcome == "failed"
    assert gate(result, "replay.p95").outcome == "failed"
    assert "replay.p99" in result.message


def test_replay_error_rate_fails_on_its_threshold(
        triton: tuple[ModelServer, LoadedSpec], tmp_path: Path) -> None:
    # A request timeout far below any answer: every request is a timeout.
    server, loaded = triton
    body_timeout = {"request_timeout": "1us"}
    result = replayed((server, _with_latency(loaded, body_timeout)), tmp_path,
                      {"p99": "2s", "error_rate": "1%"})
    errors = gate(result, "replay.error_rate")
    assert errors.outcome == "failed", errors
    assert result.status is Status.FAILED


def test_a_times_only_log_takes_the_data_files_payloads_on_torchserve(
        torchserve: tuple[ModelServer, LoadedSpec], tmp_path: Path) -> None:
    log = tmp_path / "times.jsonl"
    lines = [json.loads(line) for line in (REPO / LOG).read_text().splitlines()]
    log.write_text("".join(json.dumps({"t": line["t"]}) + "\n" for line in lines))
    data = tmp_path / "requests.jsonl"
    data.write_text("".join(json.dumps(line["inputs"]) + "\n" for line in lines[:10]))
    result = replayed(torchserve, tmp_path, {"p99": "5s", "p95": "5s"}, log=log,
                      data=str(data), speed="2x")
    assert result.status is Status.PASSED, result.message
    assert result.details["payloads"] == "data"
    assert result.metrics["requests"] == len(lines)
    assert result.metrics["replay_s"] == pytest.approx(
        (lines[-1]["t"] - lines[0]["t"]) / 2, abs=1e-6)


def _with_latency(loaded: LoadedSpec, settings: dict[str, Any]) -> LoadedSpec:
    body = loaded.spec.model_dump(mode="json")
    body["stages"]["latency"].update(settings)
    return dataclasses.replace(loaded, spec=validate_spec(body))
