"""Distributed correctness: the stall scenario sent by 2 Ray load workers.

The schedule of benchmarks/stall_scenario.py (100/s for 9 s, the model stalling 300 ms on
every 200th request) is interleaved over the workers, which start together on a local Ray
(loopback, started and shut down here). Reported, as one JSON line at the end:

- distributed_stall_p99_ratio: the merged open-loop p99 / the queue-replay prediction
  (goal 0.95-1.05), from a start wherever the model's stall counter happens to be;
- distributed_stall_p99_ratio_aligned: the same with the first request right after a
  stall, as the prediction assumes (as tests/integration/test_measurement.py does);
- distributed_lag_p99_ms: the worst worker's schedule lag p99 over both runs (goal < 1 ms);
- single_process_lag_p99_ms: the same schedule from one process, for comparison: the lag
  this machine allows whatever the workers do;
- distributed_count_error: merged request count minus scheduled, the larger of the two
  runs' by magnitude (goal 0).

    python benchmarks/distributed.py

benchmarks/loadgen.py calls `distributed_stall` for its headline.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from benchmarks.stall_scenario import StallScenario  # noqa: E402
from pipeline.measure.distributed.run import LoadCluster  # noqa: E402
from pipeline.measure.loadgen import Phase, closed_loop, open_loop, paced_sequential  # noqa: E402
from pipeline.measure.open_loop import OpenLoopResult  # noqa: E402
from pipeline.request_types import HttpRequest  # noqa: E402
from pipeline.servers.triton.server import TritonServer  # noqa: E402

WORKERS = 2


def align_to_stall(server: TritonServer, target: HttpRequest, scenario: StallScenario) -> None:
    """Send requests until the next one is the first after a stall, as in the prediction."""
    used = int(server.stats().success_count) % scenario.every
    if used:
        asyncio.run(paced_sequential(target, 1000.0, (scenario.every - used) / 1000, 5.0))


def _figures(outcome: OpenLoopResult, scenario: StallScenario,
             expected_ms: float) -> tuple[float, float, int]:
    steady = outcome.phases["steady"]
    scheduled = int(scenario.rate * scenario.seconds)
    lag_ms = max((row["lag_p99_ms"] or 0.0) for row in outcome.workers)
    return (steady.percentile_ms(99) / expected_ms, lag_ms,
            int(steady.histogram.get_total_count()) - scheduled)


def distributed_stall(folder: Path, workers: int = WORKERS) -> dict[str, Any]:
    scenario = StallScenario()
    phases = [Phase("steady", scenario.rate, scenario.seconds)]
    with scenario.serving(folder) as server:
        target = server.infer_request({"x": np.ones((1, 1), dtype=np.float32)})
        asyncio.run(closed_loop(target, 1, 0.5, 5.0))
        quiet = asyncio.run(closed_loop(target, 1, 1.0, 5.0))
        expected = scenario.expected_p99_ms(quiet.percentile_ms(50) / 1e3)
        # The same schedule from this one process: the lag this machine allows anyway.
        single = asyncio.run(open_loop(target, phases, 10.0))
        cluster = LoadCluster(workers)
        try:
            # Warm the workers (first event loop, first connections) before measuring.
            cluster.open_window(workers, "benchmark", target, [Phase("warm", 50.0, 1.0)],
                                10.0, "warm-up")
            plain = cluster.open_window(workers, "benchmark", target, phases, 10.0,
                                        "stall scenario")
            align_to_stall(server, target, scenario)
            aligned = cluster.open_window(workers, "benchmark", target, phases, 10.0,
                                          "stall scenario, aligned")
        finally:
            cluster.close()
    ratio, lag, error = _figures(plain, scenario, expected)
    ratio_aligned, lag_aligned, error_aligned = _figures(aligned, scenario, expected)
    print(f"stall scenario from {workers} Ray workers: p99 {ratio:.3f}x the prediction "
          f"({expected:.0f} ms), aligned {ratio_aligned:.3f}x; lag p99 "
          f"{max(lag, lag_aligned):.3f} ms; count error {error}, aligned {error_aligned}",
          file=sys.stderr)
    return {"distributed_workers": float(workers),
            "distributed_stall_p99_ratio": round(ratio, 3),
            "distributed_stall_p99_ratio_aligned": round(ratio_aligned, 3),
            "distributed_stall_p99_ms_expected": round(expected, 2),
            "distributed_lag_p99_ms": round(max(lag, lag_aligned), 3),
            "distributed_lag_p99_ms_runs": [round(lag, 3), round(lag_aligned, 3)],
            "single_process_lag_p99_ms": round(single.lag_p99_us / 1e3, 3),
            "distributed_count_error": float(max(error, error_aligned, key=abs))}


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="serve-pipeline-distributed-"))
    try:
        figures = distributed_stall(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
