from __future__ import annotations

import random
from pathlib import Path

import pytest
from pydantic_core import PydanticCustomError

from pipeline.errors import SpecError
from pipeline.gates import memory_growth
from pipeline.gates.memory_growth import (
    DEFAULT_RATE,
    GATE,
    TOTAL_GATE,
    leak_rate,
    leak_rate_of,
    rate_gate,
    requests_at,
    total_gate,
)
from pipeline.servers.specs import load_spec
from pipeline.spec.units import ByteSize, parse_size
from pipeline.stage_result import GateOutcome

ALPHA = 0.05


def sampled(kib_per_request: float, seed: int, rate: float = 800.0,
            seconds: float = 10.0) -> tuple[list[float], list[float], list[float]]:
    """RSS sampled every 0.2 s while `rate` requests/s are served, with allocator noise."""
    rng = random.Random(seed)
    times = [i * 0.2 for i in range(int(seconds / 0.2) + 1)]
    served = [rate * t for t in times]
    rss = [400 + kib_per_request * n / 1024 + rng.gauss(0, 0.5) for n in served]
    return served, rss, times


def test_a_leak_over_the_rate_fails_the_gate_on_its_bound() -> None:
    measured = leak_rate(*sampled(4.0, seed=1), ALPHA)   # 4 KiB a request
    true_rate = 4.0 * 1000 / 1024                       # MiB per 1,000 requests
    assert measured is not None
    assert measured.low_mb <= true_rate <= measured.high_mb
    assert measured.per_1000_mb == pytest.approx(true_rate, abs=0.1)
    assert measured.per_minute_mb == pytest.approx(measured.per_1000_mb * 800 * 60 / 1000)
    verdict = rate_gate(measured, DEFAULT_RATE)
    assert verdict.name == GATE and verdict.outcome == "failed"
    assert "lower bound" in verdict.reason and "MiB/min" in verdict.reason


def test_flat_memory_passes_and_a_leak_at_the_rate_is_not_passed() -> None:
    flat = leak_rate(*sampled(0.0, seed=2), ALPHA)
    assert rate_gate(flat, DEFAULT_RATE).outcome == "passed"
    # 1 KiB a request is the default limit itself (1 MiB per 1,000): never a pass.
    at_limit = [rate_gate(leak_rate(*sampled(1.0, seed=s), ALPHA), DEFAULT_RATE).outcome
                for s in range(20)]
    assert at_limit.count(GateOutcome.PASSED) <= 3


def test_growth_within_allocator_noise_is_not_failed() -> None:
    # A slope over the limit that adds up to under NOISE_MB over the span: inconclusive.
    served, rss, times = sampled(0.0, seed=3, rate=100.0)
    rss = [value + 2.0 * n / 1000 for value, n in zip(rss, served, strict=True)]
    verdict = rate_gate(leak_rate(served, rss, times, ALPHA), DEFAULT_RATE)
    assert verdict.outcome == "inconclusive" and "stages.latency.duration" in verdict.reason


def test_memory_that_could_not_be_measured_fails_closed() -> None:
    assert leak_rate([1.0, 2.0], [400.0, 401.0], [0.0, 1.0], ALPHA) is None
    assert leak_rate([5.0] * 4, [400.0] * 4, [0.0, 1.0, 2.0, 3.0], ALPHA) is None
    verdict = rate_gate(None, DEFAULT_RATE)
    assert verdict.outcome == "failed" and verdict.observed == "not measured"
    assert leak_rate_of([(0.0, 400.0)], [], ALPHA) is None


def test_requests_are_interpolated_within_each_window() -> None:
    spans = [(0.0, 1.0, 100), (2.0, 3.0, 300)]
    assert requests_at(0.5, spans) == pytest.approx(50)
    assert requests_at(1.5, spans) == pytest.approx(100)
    assert requests_at(2.25, spans) == pytest.approx(175)
    assert requests_at(9.0, spans) == pytest.approx(400)
    samples = [(t / 10, 400 + 0.004 * requests_at(t / 10, spans)) for t in range(31)]
    measured = leak_rate_of(samples, spans, ALPHA)
    assert measured is not None and measured.per_1000_mb == pytest.approx(4.0, rel=1e-6)


def test_total_growth_over_its_limit_fails() -> None:
    limit = parse_size("64MiB")
    over = total_gate(400.0, 480.5, limit)
    assert over.name == TOTAL_GATE and not over.passed
    assert over.observed == pytest.approx(80.5) and over.threshold == 64.0
    assert "FAILED" in over.describe()
    assert total_gate(400.0, 401.0, limit).passed
    unmeasured = total_gate(400.0, None, limit)
    assert not unmeasured.passed and unmeasured.observed == "not measured"


@pytest.mark.parametrize(("text", "size"), [
    ("64MiB", 64 * 2**20), ("512KiB", 512 * 2**10), ("1.5GiB", 3 * 2**29), ("100B", 100),
    ("2 MiB", 2 * 2**20),
])
def test_sizes_parse_exactly(text: str, size: int) -> None:
    assert parse_size(text) == ByteSize(size, text)


@pytest.mark.parametrize("value", [64, 64.0, "64", "64MB", "64 mb", "0.5B", "-1MiB", True, None])
def test_sizes_without_a_binary_unit_are_refused(value: object) -> None:
    with pytest.raises(PydanticCustomError):
        parse_size(value)


def test_a_bare_number_threshold_is_a_spec_error(project: Path) -> None:
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text().replace(
        "latency: {concurrency: 8, warmup: 3s, duration: 10s}",
        "latency: {concurrency: 8, warmup: 3s, duration: 10s, max_memory_growth: 64}"))
    with pytest.raises(SpecError) as caught:
        load_spec(spec, None)
    assert "stages.latency.max_memory_growth" in str(caught.value)
    assert "64MiB" in str(caught.value)


def test_the_default_threshold_and_turning_it_off(project: Path) -> None:
    spec = project / "serve.yaml"
    configured = load_spec(spec, None).spec.stages.latency.max_memory_growth
    assert configured is None
    assert memory_growth.limit_for(configured, "triton") == parse_size("64MiB")
    assert memory_growth.limit_for(configured, "torchserve") == parse_size("256MiB")
    spec.write_text(spec.read_text().replace(
        "latency: {concurrency: 8, warmup: 3s, duration: 10s}",
        "latency: {concurrency: 8, warmup: 3s, duration: 10s, max_memory_growth: false}"))
    configured = load_spec(spec, None).spec.stages.latency.max_memory_growth
    assert configured is False
    assert memory_growth.limit_for(configured, "triton") is None
    spec.write_text(spec.read_text().replace("max_memory_growth: false",
                                             "max_memory_growth: 8MiB"))
    configured = load_spec(spec, None).spec.stages.latency.max_memory_growth
    assert memory_growth.limit_for(configured, "torchserve") == parse_size("8MiB")


def test_the_default_rate_and_turning_it_off(project: Path) -> None:
    spec = project / "serve.yaml"
    configured = load_spec(spec, None).spec.stages.latency.memory_growth_rate
    assert configured is None and memory_growth.rate_limit_for(configured) == DEFAULT_RATE
    spec.write_text(spec.read_text().replace(
        "latency: {concurrency: 8, warmup: 3s, duration: 10s}",
        "latency: {concurrency: 8, warmup: 3s, duration: 10s, memory_growth_rate: false}"))
    configured = load_spec(spec, None).spec.stages.latency.memory_growth_rate
    assert memory_growth.rate_limit_for(configured) is None
    spec.write_text(spec.read_text().replace("memory_growth_rate: false",
                                             "memory_growth_rate: 256KiB"))
    configured = load_spec(spec, None).spec.stages.latency.memory_growth_rate
    assert memory_growth.rate_limit_for(configured) == parse_size("256KiB")
