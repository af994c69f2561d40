"""Latency verdicts on a real Triton: a clear pass, a threshold near the measured p99,
and thresholds far below what the server can do (short windows throughout).

Each test judges outcomes with margins: a busy machine changes how many requests a window
holds and how correlated they are (so how long a verdict takes), never which way a clear
margin goes. The error-rate SLO is 1% here, so that the few thousand requests of these
short runs can show it (0.1% needs about 3,000 requests without an error)."""

from __future__ import annotations

import dataclasses
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
from stages import latency
from tests.support.cli import cli, latest_record

from .test_measurement import served_example

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ModelServer, LoadedSpec]]:
    yield from served_example("serve.yaml.example", tmp_path_factory.mktemp("triton"))


def measure(triton: tuple[ModelServer, LoadedSpec], tmp_path: Path, slo: dict[str, Any],
            max_windows: int = 3, windows: int = 2, window_ms: int = 400,
            **verdict: Any) -> StageResult:
    server, loaded = triton
    body = loaded.spec.model_dump(mode="json")
    body["slo"].update({"error_rate": "1%", **slo})
    body["stages"]["latency"].update(
        concurrency=4, warmup="300ms", duration=f"{window_ms * max_windows}ms",
        stability={"windows": windows, "max_windows": max_windows}, verdict=verdict)
    spec = validate_spec(body)
    with ExitStack() as resources:
        ctx = RunContext(dataclasses.replace(loaded, spec=spec), "test", tmp_path, {},
                         resources, server=server)
        return latency.run(ctx)


def gate(result: StageResult, name: str) -> Gate:
    return next(g for g in result.gates if g.name == name)


def test_a_clear_margin_passes_before_the_cap(
        triton: tuple[ModelServer, LoadedSpec], tmp_path: Path) -> None:
    # 1.5 s windows: enough requests for a p99 bound even when a busy machine correlates
    # them strongly (the unit tests check that a clear verdict stops at the fewest windows).
    result = measure(triton, tmp_path, {"p99": "2s", "p95": None, "queue_mean": "1s"},
                     max_windows=5, windows=3, window_ms=1500)
    p99 = gate(result, "latency.p99")
    assert result.status is Status.PASSED, result.message
    assert p99.outcome == "passed" and p99.samples == result.metrics["latency_samples"]
    assert p99.samples == result.metrics["requests"]            # one count for all
    assert p99.interval is not None and p99.interval[1] is not None
    assert isinstance(p99.observed, (int, float))
    assert p99.interval[0] is not None and p99.interval[0] <= p99.observed <= p99.interval[1]
    assert result.details["decided"]
    assert gate(result, "latency.server_queue_mean").outcome == "passed"
    assert gate(result, "latency.error_rate").outcome == "passed"


def test_far_below_the_server_fails_p99_and_the_queue_mean(
        triton: tuple[ModelServer, LoadedSpec], tmp_path: Path) -> None:
    result = measure(triton, tmp_path, {"p99": "50us", "p95": None, "queue_mean": "1us"},
                     max_windows=4)
    p99 = gate(result, "latency.p99")
    assert result.status is Status.FAILED
    assert p99.outcome == "failed" and p99.interval is not None
    assert p99.interval[0] is not None and p99.interval[0] > 0.05
    # A clear failure stops before the cap (a window named as an outlier adds one).
    assert result.details["decided"] and result.metrics["windows_kept"] <= 3
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
        assert isinstance(p99.threshold, (int, float))
        threshold = float(p99.threshold)
        if p99.outcome == "passed":
            assert high is not None and high <= threshold
        elif p99.outcome == "failed":
            assert low is not None and low > threshold
            assert result.status is Status.FAILED
        else:
            assert p99.reason and result.metrics["windows_kept"] >= 3   # ran to the cap
            # Accepted only while the observed p99 is within the threshold.
            leans_over = float(p99.observed) > threshold  # type: ignore[arg-type]
            passes = accept and not leans_over
            assert result.status is (Status.PASSED if passes else Status.FAILED)
            assert "inconclusive" in result.message.lower()


SLOW_HALF_OF_THE_TIME = '''import time

import torch


class SlowEveryOtherTwoSeconds(torch.nn.Module):
    """Fast for two seconds, then 100 ms per execution for two: windows that disagree."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if int(time.time() / 2) % 2 == 0:
            time.sleep(0.1)
        return torch.softmax(self.linear(x), dim=-1)


def build() -> torch.nn.Module:
    return SlowEveryOtherTwoSeconds()
'''


def test_an_unstable_measurement_is_inconclusive_and_blocks(fast_project: Path) -> None:
    import torch

    (fast_project / "unstable.py").write_text(SLOW_HALF_OF_THE_TIME)
    linear = torch.nn.Linear(16, 4).state_dict()
    torch.save({f"linear.{key}": value for key, value in linear.items()},
               fast_project / "unstable.pt")
    spec = fast_project / "serve.yaml"
    text = spec.read_text().replace("source: examples/mlp/model.pt", "source: unstable.pt")
    text = text.replace("format: torchscript", "format: eager\n  entrypoint: unstable.py:build")
    text = text.replace("  p99: 50ms\n  p95: 30ms\n", "  p99: 25ms\n")
    text = text.replace("duration: 2s,\n            stability: {windows: 2, max_windows: 2}, "
                        "verdict: {accept_inconclusive: true}",
                        "duration: 6s,\n            stability: {windows: 3, max_windows: 6}")
    assert "p99: 25ms" in text and "max_windows: 6" in text
    spec.write_text(text)
    result = cli(["run", "--stages", "latency"], fast_project)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    stage = next(s for s in latest_record(fast_project)["stages"] if s["name"] == "latency")
    p99 = next(g for g in stage["gates"] if g["name"] == "latency.p99")
    assert stage["status"] == "failed" and p99["passed"] is False, p99
    assert p99["samples"] > 0 and len(p99["interval"]) == 2 and p99["reason"]
    # Half of the run is slow, so its pooled p99 is far over 25 ms: a decided failure,
    # or (windows far apart) inconclusive at the cap. Either way the run is blocked.
    if p99["outcome"] == "inconclusive":
        assert stage["metrics"]["windows_kept"] >= 6 and "INCONCLUSIVE" in result.stdout
    else:
        assert p99["outcome"] == "failed" and p99["interval"][0] > 25, p99
