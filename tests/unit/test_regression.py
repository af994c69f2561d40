from __future__ import annotations

from typing import Any

from pipeline.config import RegressionStage
from pipeline.regression import regression_gates


def record(p99: float, throughput: float) -> dict[str, Any]:
    return {"stages": [
        {"name": "latency", "metrics": {"p99_ms": p99, "p95_ms": p99 * 0.8,
                                        "throughput_rps": throughput, "error_rate": 0.0,
                                        "concurrency": 8.0}},
        {"name": "saturation", "metrics": {"knee_throughput_rps": throughput * 2}}]}


def test_a_slower_release_fails_the_gate_and_a_similar_one_passes() -> None:
    settings = RegressionStage(gate=True)
    gates, deltas = regression_gates(record(13.0, 900.0), record(10.0, 1000.0), settings)
    failed = {g.name for g in gates if not g.passed}
    assert "regression.latency.p99_ms" in failed          # +30 %
    assert "regression.latency.throughput_rps" not in failed   # -10 %: at the tolerance
    assert any(d.regressed and d.metric == "p99_ms" for d in deltas)
    gates, _ = regression_gates(record(10.2, 995.0), record(10.0, 1000.0), settings)
    assert all(g.passed for g in gates)


def test_only_watched_metrics_become_gates() -> None:
    settings = RegressionStage(gate=True, metrics=["latency.p99_ms"])
    gates, _ = regression_gates(record(20.0, 100.0), record(10.0, 1000.0), settings)
    assert [g.name for g in gates] == ["regression.latency.p99_ms"]
