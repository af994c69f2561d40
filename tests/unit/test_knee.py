from __future__ import annotations

from pipeline.knee import ProbeOutcome, find_knee


def synthetic(capacity_rps: float, service_ms: float, slo_ms: float):  # type: ignore[no-untyped-def]
    """A server that scales linearly up to `capacity_rps`, then queues (Little's law)."""
    calls: list[int] = []

    def probe(concurrency: int) -> ProbeOutcome:
        calls.append(concurrency)
        throughput = min(concurrency * 1000.0 / service_ms, capacity_rps)
        p99 = max(service_ms, concurrency * 1000.0 / throughput) * 1.2
        return ProbeOutcome(concurrency, throughput, p99, 0.0, p99 <= slo_ms)

    return probe, calls


def test_bisects_between_last_good_and_first_bad() -> None:
    calls: list[int] = []

    def growing(concurrency: int) -> ProbeOutcome:
        calls.append(concurrency)
        p99 = 1.0 * concurrency
        return ProbeOutcome(concurrency, concurrency * 100.0, p99, 0.0, p99 <= 45.0)

    search = find_knee(growing, max_concurrency=128, max_bisections=6)
    assert search.knee is not None and search.knee.concurrency == 45
    assert calls[:7] == [1, 2, 4, 8, 16, 32, 64]
    assert len(calls) <= 7 + 6
    assert "SLO missed at concurrency 64" in search.stop_reason


def test_stops_when_throughput_stops_growing() -> None:
    probe, calls = synthetic(capacity_rps=4000.0, service_ms=2.0, slo_ms=1000.0)
    search = find_knee(probe, max_concurrency=256)
    assert search.knee is not None
    assert "stopped growing" in search.stop_reason
    assert calls == [1, 2, 4, 8, 16]
    assert search.knee.throughput_rps == 4000.0


def test_no_load_meets_the_slo() -> None:
    probe, calls = synthetic(capacity_rps=100.0, service_ms=50.0, slo_ms=10.0)
    search = find_knee(probe, max_concurrency=64)
    assert search.knee is None and calls == [1]


def test_cap_is_respected_and_not_exceeded() -> None:
    def linear(concurrency: int) -> ProbeOutcome:
        return ProbeOutcome(concurrency, concurrency * 100.0, 1.0, 0.0, True)

    search = find_knee(linear, max_concurrency=24)
    assert [p.concurrency for p in search.probes] == [1, 2, 4, 8, 16, 24]
    assert search.knee is not None and search.knee.concurrency == 24
    assert "max_concurrency 24" in search.stop_reason
