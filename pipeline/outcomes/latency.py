"""The latency stage's metrics (`stages/latency.py`): what the report, the regression gate
and tune read. Per-percentile bounds (`p99_low_ms`, `p99_design_effect`, ...) and the
memory-growth fit are named by what was gated, so they stay in `extra`."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.outcomes.base import MetricsOutcome


@dataclass(frozen=True, kw_only=True)
class LatencyOutcome(MetricsOutcome):
    # The client's view of the measured windows (ms), errors, throughput.
    p50_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    p999_ms: float | None = None
    max_ms: float | None = None
    mean_ms: float | None = None
    requests: float | None = None
    errors: float | None = None
    error_rate: float | None = None
    throughput_rps: float | None = None
    client_cpu_ms_per_request: float | None = None
    # The server's own counters over the same windows (per request, microseconds).
    server_requests: float | None = None
    server_executions: float | None = None
    server_avg_batch_size: float | None = None
    server_queue_us: float | None = None
    server_compute_input_us: float | None = None
    server_compute_infer_us: float | None = None
    server_compute_output_us: float | None = None
    server_inference_us: float | None = None
    # The server's process tree after the windows (MiB), where it is ours to see.
    server_rss_mb: float | None = None
    server_processes: float | None = None
    server_pss_mb: float | None = None
    server_gpu_mb: float | None = None
    # How the measurement ran, and the limits it was held to.
    latency_samples: float | None = None
    concurrency: float | None = None
    batch_size: float | None = None
    windows: float | None = None
    windows_kept: float | None = None
    stabilised: float | None = None
    verdict_s: float | None = None
    queue_budget_us: float | None = None
    queue_mean_budget_us: float | None = None
    server_rss_before_mb: float | None = None
    memory_growth_mb: float | None = None
