"""Recorded gate results for releases published by tests and benchmarks without a run.

The shapes are those a real run records (stages/latency.py, stages/saturation.py via
stages/publish.py): the promotion policy judges exactly these fields. The default values
pass serve.yaml.example's SLO (p99 50 ms, p95 30 ms, error rate 0.1 %, 100/s, queue mean
10 ms) and the shipped production overlay's p99 40 ms.
"""

from __future__ import annotations

from typing import Any


def gate(stage: str, name: str, observed: float | str, threshold: float, comparison: str,
         unit: str, outcome: str = "passed",
         interval: tuple[float | None, float | None] | None = None) -> dict[str, Any]:
    return {"stage": stage, "name": name, "observed": observed, "threshold": threshold,
            "passed": outcome == "passed", "comparison": comparison, "unit": unit,
            "outcome": outcome, "interval": list(interval) if interval else None,
            "samples": 4000, "reason": ""}


def recorded(p99_ms: float = 6.0, p99_high_ms: float | None = None, p99_threshold: float = 50.0,
             p99_outcome: str = "passed", with_p95: bool = True,
             stall: tuple[float, float] | None = None) -> dict[str, Any]:
    """`gates` and `stages` of a manifest body, as a passed run records them."""
    high = p99_high_ms if p99_high_ms is not None else p99_ms * 1.1
    gates = [gate("latency", "latency.p99", p99_ms, p99_threshold, "<=", "ms", p99_outcome,
                  (p99_ms * 0.9, high))]
    if with_p95:
        gates.append(gate("latency", "latency.p95", 4.0, 30.0, "<=", "ms", "passed",
                          (3.6, 4.4)))
    if stall is not None:                  # (observed, threshold) seconds
        gates.append(gate("latency", "latency.longest_stall", stall[0], stall[1], "<=", "s"))
    gates += [
        gate("latency", "latency.error_rate", 0.0, 0.1, "<=", "%"),
        gate("latency", "latency.throughput", 900.0, 100.0, ">=", "/s"),
        gate("latency", "latency.server_queue_mean", 1.0, 10.0, "<=", "ms"),
        gate("saturation", "saturation.knee_concurrency", 16.0, 1.0, ">=", ""),
        gate("saturation", "saturation.knee_throughput", 1500.0, 100.0, ">=", "/s"),
        gate("saturation", "saturation.capacity_rps", 1400.0, 100.0, ">=", "/s",
             interval=(1400.0, 1500.0)),
    ]
    stages = {"latency": {"status": "passed", "metrics": {"p99_ms": p99_ms}},
              "saturation": {"status": "passed",
                             "metrics": {"knee_p99_ms": p99_ms * 1.5,
                                         "capacity_p99_ms": p99_ms * 1.4}}}
    return {"gates": gates, "stages": stages}
