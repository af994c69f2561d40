"""Exploration: a few short closed-loop windows per (device, instances), read against the
server's own counters, to fit the performance model.

Each explored server runs the largest max_batch_size of the space with the smallest
delay: at concurrency 1 it forms batches of 1, at a high concurrency full batches, and in
between mixed ones, which is what separates the per-batch from the per-item compute.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.context import Progress, no_progress
from pipeline.measure.sender import LoadSender
from pipeline.measure.targets import spec_target
from pipeline.measure.windows import closed_window, server_memory
from pipeline.servers import server_kind
from pipeline.servers.base import ModelServer
from pipeline.spec.models import LoadedSpec
from pipeline.tune.model import Observation
from pipeline.tune.space import Config

WARMUP_S = 0.5
# The progress view shows the exploration's windows under this name.
PROGRESS_ROW = "explore"
# Enough to fill the largest batches of two instances; more only queues (and times out).
MAX_CONCURRENCY = 64


@dataclass(frozen=True)
class ExplorePlan:
    config: Config
    concurrencies: tuple[int, ...]
    window_s: float


def plan_for(space: list[Config], window_s: float) -> list[ExplorePlan]:
    """One server config per (device, instances) of the space."""
    plans = []
    for device, instances in sorted({(c.device, c.instances) for c in space}):
        own = [c for c in space if c.device == device and c.instances == instances]
        size = max(c.max_batch_size for c in own)
        delay = min(c.max_queue_delay_us for c in own if c.max_batch_size == size)
        # Every level keeps each instance busy (the throughput fit assumes it): batches
        # of about 1, a quarter of max_batch_size, and full ones.
        high = min(instances * size, MAX_CONCURRENCY)
        middle = max(instances + 1, instances * size // 4)
        levels = tuple(sorted({instances, min(middle, high), high}))
        plans.append(ExplorePlan(Config(device, instances, size, delay), levels, window_s))
    return plans


def explore(server: ModelServer, loaded: LoadedSpec, plan: ExplorePlan, run_dir: Path,
            progress: Progress = no_progress) -> list[Observation]:
    """Measure the plan's windows on a server already serving `plan.config`."""
    candidate = plan.config.applied(loaded)
    per_request = server_kind(candidate.spec.server.kind).tuning.compute_per_request
    run_dir.mkdir(parents=True, exist_ok=True)

    def shown(done_s: float, total_s: float, label: str) -> None:
        progress(PROGRESS_ROW, done_s, total_s, label)

    sender = LoadSender(candidate.spec.stages.latency.request_timeout.seconds, shown)
    target = spec_target(candidate, server)
    top = max(plan.concurrencies)
    closed_window(sender, server, target, top, WARMUP_S, "exploration warm-up")
    observations = []
    for concurrency in plan.concurrencies:
        before = server.stats()
        window = closed_window(sender, server, target, concurrency, plan.window_s,
                               f"{plan.config.label} at concurrency {concurrency}")
        delta = server.stats().since(before)
        observations.append(_observation(plan.config, concurrency, window.summary(),
                                         delta.batch_executions, delta.window_metrics(),
                                         per_request))
    memory, _ = server_memory(server)
    last = observations[-1]
    observations[-1] = Observation(**{**last.__dict__, "rss_mb": memory.get("server_rss_mb"),
                                      "gpu_mb": memory.get("server_gpu_mb")})
    return observations


def _observation(config: Config, concurrency: int, summary: dict[str, float],
                 batches: dict[int, int], server: dict[str, float],
                 per_request: bool) -> Observation:
    requests = server.get("server_requests", 0.0)
    compute_keys = [k for k in server if k.startswith("server_compute_")]
    compute_us = sum(server[k] for k in compute_keys) * requests
    return Observation(config.device, config.instances, config.max_batch_size, concurrency,
                       summary["throughput_rps"], summary["p50_ms"], summary["p99_ms"],
                       summary["error_rate"], dict(batches), compute_us, per_request)
