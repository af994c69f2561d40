"""The readiness stage's metrics (`stages/readiness.py`): the cold start and the memory
of the server's process tree when it first reported ready."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.outcomes.base import MetricsOutcome


@dataclass(frozen=True, kw_only=True)
class ReadinessOutcome(MetricsOutcome):
    cold_start_s: float | None = None
    cold_rss_mb: float | None = None
