from __future__ import annotations

from pipeline.statistics.knee import ProbeOutcome, find_knee


def synthetic(capacity_rps: float, service_ms: float, slo_ms: float):
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
    # Passing at the cap with throughput still growing is a lower bound, never a knee.
    assert search.knee is None and search.bound == "lower"
    assert search.best is not None and search.best.concurrency == 24
    assert "capacity ≥ 2400/s (cap reached)" in search.stop_reason


def scripted(points: dict[int, tuple[float, float]], slo_ms: float):
    """Probe outcomes from a table: concurrency -> (throughput, p99)."""
    def probe(concurrency: int) -> ProbeOutcome:
        throughput, p99 = points[concurrency]
        return ProbeOutcome(concurrency, throughput, p99, 0.0, p99 <= slo_ms)

    return probe


def test_a_throughput_drop_after_the_peak_keeps_the_peak_as_the_knee() -> None:
    # As measured on the example's ONNX model: c=32 did less, at twice the p99.
    probe = scripted({1: (3000.0, 0.5), 2: (6000.0, 0.6), 4: (11000.0, 0.8),
                      8: (18000.0, 1.0), 16: (21666.0, 1.31), 32: (19276.0, 3.08)}, 50.0)
    search = find_knee(probe, max_concurrency=64)
    assert "stopped growing at concurrency 32" in search.stop_reason
    assert search.knee is not None and search.knee.concurrency == 16
    assert search.knee.throughput_rps == 21666.0 and search.bound == "exact"


def test_the_knee_is_never_below_a_passing_probe() -> None:
    # A bisection probe that passes with less throughput does not replace a better one.
    probe = scripted({1: (100.0, 5.0), 2: (200.0, 8.0), 4: (400.0, 20.0), 8: (800.0, 45.0),
                      16: (900.0, 80.0), 12: (780.0, 49.0), 14: (850.0, 60.0),
                      13: (770.0, 49.5)}, 50.0)
    search = find_knee(probe, max_concurrency=64)
    knee = search.knee
    assert knee is not None and knee.concurrency == 8
    assert all(knee.throughput_rps >= p.throughput_rps for p in search.probes if p.passed)


def test_ties_go_to_the_lower_p99() -> None:
    probe = scripted({1: (500.0, 2.0), 2: (1000.0, 3.0), 4: (1000.0, 2.5)}, 50.0)
    search = find_knee(probe, max_concurrency=64)
    assert search.knee is not None and search.knee.concurrency == 4


def test_a_first_probe_that_fails_leaves_no_knee_and_no_bound() -> None:
    probe = scripted({1: (50.0, 80.0)}, 50.0)
    search = find_knee(probe, max_concurrency=64)
    assert search.best is None and search.knee is None
    assert search.stop_reason == "SLO missed at concurrency 1"


def test_noise_around_the_plateau_threshold() -> None:
    # +4.9% is inside the 5% plateau: the ramp stops, and the slightly higher probe wins.
    probe = scripted({1: (1000.0, 1.0), 2: (1900.0, 1.1), 4: (1993.1, 1.9)}, 50.0)
    search = find_knee(probe, max_concurrency=64)
    assert [p.concurrency for p in search.probes] == [1, 2, 4]
    assert search.knee is not None and search.knee.concurrency == 4
    # +5.1% keeps growing; a dip followed by a small recovery is judged against the best.
    probe = scripted({1: (1000.0, 1.0), 2: (1051.0, 1.1), 4: (1200.0, 1.5),
                      8: (1150.0, 2.0), 16: (1210.0, 3.0)}, 50.0)
    search = find_knee(probe, max_concurrency=64)
    assert [p.concurrency for p in search.probes] == [1, 2, 4, 8]
    assert search.knee is not None and search.knee.concurrency == 4


def test_a_measured_load_starts_the_ramp_above_it() -> None:
    seen: list[int] = []

    def probe(concurrency: int) -> ProbeOutcome:
        seen.append(concurrency)
        return ProbeOutcome(concurrency, 100.0 * min(concurrency, 32), 5.0, 0.0, True)

    measured = ProbeOutcome(8, 790.0, 4.0, 0.0, True, measured_by="latency stage")
    search = find_knee(probe, max_concurrency=128, measured=measured)
    assert seen[0] == 16 and 1 not in seen
    assert search.probes[0] is measured
    assert search.best is not None and search.best.concurrency == 32


def test_a_measured_load_that_missed_or_sits_at_the_cap_is_not_used() -> None:
    seen: list[int] = []

    def probe(concurrency: int) -> ProbeOutcome:
        seen.append(concurrency)
        return ProbeOutcome(concurrency, 100.0 * concurrency, 5.0, 0.0, concurrency <= 4)

    missed = ProbeOutcome(8, 790.0, 80.0, 0.0, False, measured_by="latency stage")
    find_knee(probe, max_concurrency=64, measured=missed)
    assert seen[0] == 1
    seen.clear()
    at_cap = ProbeOutcome(8, 790.0, 4.0, 0.0, True, measured_by="latency stage")
    find_knee(probe, max_concurrency=8, measured=at_cap)
    assert seen[0] == 1


def test_the_ramp_bisects_down_to_a_measured_load_when_the_next_misses() -> None:
    def probe(concurrency: int) -> ProbeOutcome:
        return ProbeOutcome(concurrency, 100.0 * concurrency, 5.0 if concurrency <= 11 else 90.0,
                            0.0, concurrency <= 11)

    measured = ProbeOutcome(8, 790.0, 4.0, 0.0, True, measured_by="latency stage")
    search = find_knee(probe, max_concurrency=64, measured=measured)
    assert [p.concurrency for p in search.probes] == [8, 16, 12, 10, 11]
    assert search.best is not None and search.best.concurrency == 11
