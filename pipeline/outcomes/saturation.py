"""The saturation stage's metrics (`stages/saturation.py`): the closed-loop knee, the
open-loop capacity at the SLO, the burst. A part that did not run leaves its fields None."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.outcomes.base import MetricsOutcome


@dataclass(frozen=True, kw_only=True)
class SaturationOutcome(MetricsOutcome):
    probes: float | None = None
    knee_concurrency: float | None = None
    knee_throughput_rps: float | None = None
    knee_p99_ms: float | None = None
    knee_lower_bound: float | None = None        # 1.0: no knee up to the cap
    capacity_steps: float | None = None
    capacity_search_s: float | None = None
    capacity_rps: float | None = None
    capacity_p99_ms: float | None = None
    capacity_lower_bound: float | None = None    # 1.0: the rate is a lower bound
    burst_rate_rps: float | None = None
    burst_base_rate_rps: float | None = None
    burst_p99_ms: float | None = None
    burst_base_p99_ms: float | None = None
    burst_errors: float | None = None
    burst_drain_s: float | None = None
    burst_schedule_lag_p99_ms: float | None = None
