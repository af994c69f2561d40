"""Metric names, defined once: what stages record, reports show and the regression gate
watches (as `stage.metric`).

Only the metrics in LATENCY and SATURATION may be watched: those with a better
direction (lower latency, higher throughput); a neutral one such as the average batch
size cannot regress.

`validate` refuses a name that is not here (a typo would silently turn its check
off), and the gate looks for fallbacks here when the live release was measured
before a metric existed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

# The stages whose metrics are compared and watched.
READINESS_STAGE: Final = "readiness"
PARITY_STAGE: Final = "parity"
LATENCY_STAGE: Final = "latency"
SATURATION_STAGE: Final = "saturation"
# The side-by-side regression check: per watched metric `<metric>_live`,
# `<metric>_candidate` and `<metric>_ratio` (candidate / live), and these.
REGRESSION_STAGE: Final = "regression"
REGRESSION_ROUNDS: Final = "rounds"
LIVE_COLD_START_S: Final = "live_cold_start_s"
SIDE_BY_SIDE_S: Final = "side_by_side_s"

# Client-side latency of a measured window (milliseconds), errors and throughput.
P50_MS: Final = "p50_ms"
P90_MS: Final = "p90_ms"
P95_MS: Final = "p95_ms"
P99_MS: Final = "p99_ms"
P999_MS: Final = "p999_ms"
MAX_MS: Final = "max_ms"
MEAN_MS: Final = "mean_ms"
ERROR_RATE: Final = "error_rate"
THROUGHPUT_RPS: Final = "throughput_rps"
CLIENT_CPU_MS_PER_REQUEST: Final = "client_cpu_ms_per_request"
REQUESTS: Final = "requests"
ERRORS: Final = "errors"
CONCURRENCY: Final = "concurrency"
BATCH_SIZE: Final = "batch_size"

# Server-side, per request on average (microseconds), from the server's own counters.
SERVER_QUEUE_US: Final = "server_queue_us"
SERVER_COMPUTE_INPUT_US: Final = "server_compute_input_us"
SERVER_COMPUTE_INFER_US: Final = "server_compute_infer_us"
SERVER_COMPUTE_OUTPUT_US: Final = "server_compute_output_us"
SERVER_INFERENCE_US: Final = "server_inference_us"
SERVER_REQUESTS: Final = "server_requests"
SERVER_EXECUTIONS: Final = "server_executions"
SERVER_AVG_BATCH_SIZE: Final = "server_avg_batch_size"
QUEUE_BUDGET_US: Final = "queue_budget_us"
QUEUE_MEAN_BUDGET_US: Final = "queue_mean_budget_us"
# How the latency stage's measurement went: samples behind the verdict, windows run and
# kept, whether they settled (1.0) and the seconds to a verdict.
LATENCY_SAMPLES: Final = "latency_samples"
WINDOWS: Final = "windows"
WINDOWS_KEPT: Final = "windows_kept"
STABILISED: Final = "stabilised"
VERDICT_S: Final = "verdict_s"
COMPUTE_METRICS: Final = (SERVER_COMPUTE_INPUT_US, SERVER_COMPUTE_INFER_US,
                          SERVER_COMPUTE_OUTPUT_US)

# Memory of the server's process tree after warm traffic (MiB), and at cold start.
SERVER_RSS_MB: Final = "server_rss_mb"
SERVER_PSS_MB: Final = "server_pss_mb"
SERVER_GPU_MB: Final = "server_gpu_mb"
SERVER_PROCESSES: Final = "server_processes"
COLD_RSS_MB: Final = "cold_rss_mb"
COLD_START_S: Final = "cold_start_s"
SERVER_RSS_BEFORE_MB: Final = "server_rss_before_mb"
MEMORY_GROWTH_MB: Final = "memory_growth_mb"

# Saturation: the closed-loop knee, the open-loop capacity, the burst.
KNEE_CONCURRENCY: Final = "knee_concurrency"
KNEE_THROUGHPUT_RPS: Final = "knee_throughput_rps"
KNEE_P99_MS: Final = "knee_p99_ms"
PROBES: Final = "probes"
KNEE_LOWER_BOUND: Final = "knee_lower_bound"      # 1.0: no knee up to the cap
CAPACITY_STEPS: Final = "capacity_steps"
CAPACITY_SEARCH_S: Final = "capacity_search_s"
CAPACITY_LOWER_BOUND: Final = "capacity_lower_bound"
CAPACITY_RPS: Final = "capacity_rps"
CAPACITY_P99_MS: Final = "capacity_p99_ms"
BURST_RATE_RPS: Final = "burst_rate_rps"
BURST_BASE_RATE_RPS: Final = "burst_base_rate_rps"
BURST_P99_MS: Final = "burst_p99_ms"
BURST_BASE_P99_MS: Final = "burst_base_p99_ms"
BURST_ERRORS: Final = "burst_errors"
BURST_DRAIN_S: Final = "burst_drain_s"
BURST_SCHEDULE_LAG_P99_MS: Final = "burst_schedule_lag_p99_ms"

LATENCY: Final = (
    P50_MS, P90_MS, P95_MS, P99_MS, P999_MS, MAX_MS, MEAN_MS,
    ERROR_RATE, THROUGHPUT_RPS, CLIENT_CPU_MS_PER_REQUEST,
    SERVER_QUEUE_US, *COMPUTE_METRICS, SERVER_INFERENCE_US,
    SERVER_RSS_MB, SERVER_PSS_MB, SERVER_GPU_MB,
)
SATURATION: Final = (
    KNEE_CONCURRENCY, KNEE_THROUGHPUT_RPS, KNEE_P99_MS,
    CAPACITY_RPS, CAPACITY_P99_MS,
    BURST_P99_MS, BURST_BASE_P99_MS, BURST_ERRORS, BURST_DRAIN_S,
)


def watched_name(stage: str, metric: str) -> str:
    """The name the regression gate and `stages.regression.metrics` use: `stage.metric`."""
    return f"{stage}.{metric}"


WATCHABLE: Final[frozenset[str]] = frozenset(
    [watched_name(LATENCY_STAGE, name) for name in LATENCY]
    + [watched_name(SATURATION_STAGE, name) for name in SATURATION])

# A live release measured before a metric existed is compared on its predecessor:
# the knee's throughput stood for the capacity at the SLO.
BASELINE_FALLBACKS: Final[Mapping[str, tuple[str, ...]]] = {
    watched_name(SATURATION_STAGE, CAPACITY_RPS):
        (watched_name(SATURATION_STAGE, KNEE_THROUGHPUT_RPS),),
    watched_name(SATURATION_STAGE, CAPACITY_P99_MS):
        (watched_name(SATURATION_STAGE, KNEE_P99_MS),),
}


def closest(name: str) -> str | None:
    """The watchable name `name` was most likely meant to be."""
    from difflib import get_close_matches

    found = get_close_matches(name, sorted(WATCHABLE), n=1, cutoff=0.6)
    return found[0] if found else None
