"""The replay stage's metrics (`stages/replay.py`): latency from each logged request's
intended instant, the error rate, the rate the log offered, and how closely the client
kept the log's schedule."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.outcomes.base import MetricsOutcome


@dataclass(frozen=True, kw_only=True)
class ReplayOutcome(MetricsOutcome):
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    p999_ms: float | None = None
    max_ms: float | None = None
    requests: float | None = None
    errors: float | None = None
    error_rate: float | None = None
    throughput_rps: float | None = None
    offered_rps: float | None = None        # the log's requests over its span at the speed
    replay_s: float | None = None           # the log's span at the speed
    speed: float | None = None
    schedule_lag_p99_ms: float | None = None  # actual send against the logged instant
    schedule_lag_max_ms: float | None = None
    client_bound: float | None = None       # 1.0: the client fell behind the log
