from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_core import PydanticCustomError

from pipeline.errors import SpecError
from pipeline.gates import memory_growth
from pipeline.gates.memory_growth import GATE, gate, growth
from pipeline.spec.loading import load_spec
from pipeline.spec.units import ByteSize, parse_size


def test_growth_over_the_threshold_fails_the_gate() -> None:
    grown = growth({"server_rss_mb": 400.0, "server_pss_mb": 300.0},
                   {"server_rss_mb": 480.5, "server_pss_mb": 300.0}, requests=2000)
    assert grown is not None
    assert grown.growth_mb == pytest.approx(80.5)
    assert grown.per_1000_requests_mb == pytest.approx(40.25)
    verdict = gate(grown, parse_size("64MiB"))
    assert verdict.name == GATE and not verdict.passed
    assert verdict.observed == pytest.approx(80.5) and verdict.threshold == 64.0
    assert "FAILED" in verdict.describe()


def test_growth_within_the_threshold_passes() -> None:
    grown = growth({"server_rss_mb": 400.0}, {"server_rss_mb": 401.0}, requests=50_000)
    assert gate(grown, parse_size("64MiB")).passed


def test_memory_that_could_not_be_measured_fails_closed() -> None:
    assert growth({"server_rss_mb": 400.0}, {}, requests=10) is None
    verdict = gate(None, parse_size("64MiB"))
    assert not verdict.passed and verdict.observed == "not measured"


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
