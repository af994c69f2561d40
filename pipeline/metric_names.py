"""The metrics the regression gate may watch, named once: `stage.metric` as in the record.

Only metrics with a better direction (lower latency, higher throughput) are here;
a neutral one such as the average batch size cannot regress.

`validate` refuses a name that is not here (a typo would silently turn its check
off), and the gate looks for fallbacks here when the live release was measured
before a metric existed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

LATENCY: Final = (
    "p50_ms", "p90_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms", "mean_ms",
    "error_rate", "throughput_rps", "client_cpu_ms_per_request",
    "server_queue_us", "server_compute_input_us", "server_compute_infer_us",
    "server_compute_output_us", "server_inference_us",
    "server_rss_mb", "server_pss_mb", "server_gpu_mb",
)
SATURATION: Final = (
    "knee_concurrency", "knee_throughput_rps", "knee_p99_ms",
    "capacity_rps", "capacity_p99_ms",
    "burst_p99_ms", "burst_base_p99_ms", "burst_errors", "burst_drain_s",
)

WATCHABLE: Final[frozenset[str]] = frozenset(
    [f"latency.{name}" for name in LATENCY] + [f"saturation.{name}" for name in SATURATION])

# A live release measured before a metric existed is compared on its predecessor:
# the knee's throughput stood for the capacity at the SLO.
BASELINE_FALLBACKS: Final[Mapping[str, tuple[str, ...]]] = {
    "saturation.capacity_rps": ("saturation.knee_throughput_rps",),
    "saturation.capacity_p99_ms": ("saturation.knee_p99_ms",),
}


def closest(name: str) -> str | None:
    """The watchable name `name` was most likely meant to be."""
    from difflib import get_close_matches

    found = get_close_matches(name, sorted(WATCHABLE), n=1, cutoff=0.6)
    return found[0] if found else None
