from __future__ import annotations

from pipeline.measure.loadgen import LoadResult


def test_histograms_merge_and_summarise() -> None:
    first, second = LoadResult(1.0), LoadResult(1.0)
    for value in range(1, 1001):
        first.histogram.record_value(value)            # 1..1000 us
        second.histogram.record_value(value + 1000)    # 1001..2000 us
    first.completed, second.completed = 1000, 1000
    second.errors["timeout"] = 20
    first.merge(second)
    summary = first.summary()
    assert summary["requests"] == 2020
    assert summary["errors"] == 20
    assert summary["throughput_rps"] == 1000.0
    assert abs(summary["p50_ms"] - 1.0) < 0.01
    assert abs(summary["p99_ms"] - 1.98) < 0.01
    assert abs(summary["max_ms"] - 2.0) < 0.01
    assert abs(summary["error_rate"] - 20 / 2020) < 1e-12


def test_thin_percentiles_are_flagged() -> None:
    result = LoadResult(1.0)
    for value in range(50):
        result.histogram.record_value(100 + value)
    assert result.thin_percentiles() == ["p99", "p999"]
