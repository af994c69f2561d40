"""Run the interleaved plan: one window at a time, each server in its turn.

Every window's figures are kept as measured (per server, round and load point); the
curves merge a load point's windows (HDR histograms add exactly). The server's own
counters are read before the first and after the last window of each server: the
other server's windows never touch them, so the delta covers exactly its windows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline import metric_names as m
from pipeline.compare.plan import Window
from pipeline.errors import ServerError
from pipeline.measure.capacity_steps import measure_capacity
from pipeline.measure.loadgen import LoadResult, Target
from pipeline.measure.sender import LoadSender
from pipeline.measure.windows import closed_window, server_memory
from pipeline.servers.base import ModelServer, ServerStats
from pipeline.spec.models import LoadedSpec
from pipeline.statistics.capacity import CapacitySearch


@dataclass
class Contender:
    """A server that passed start, readiness and parity, ready to be measured with its
    kind's spec."""

    kind: str
    loaded: LoadedSpec
    server: ModelServer
    target: Target

    def window(self, concurrency: int, duration_s: float, label: str) -> LoadResult:
        """One closed-loop window from this process (its requests time out at the latency
        stage's request timeout); ServerError if the server dies meanwhile."""
        sender = LoadSender(self.loaded.spec.stages.latency.request_timeout.seconds)
        return closed_window(sender, self.server, self.target, concurrency, duration_s, label)


@dataclass(frozen=True)
class WindowResult:
    index: int
    round: int
    kind: str
    concurrency: int
    started_s: float
    throughput_rps: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    error_rate: float
    requests: int
    met_slo: bool

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Measured:
    windows: list[WindowResult] = field(default_factory=list)
    merged: dict[str, dict[int, LoadResult]] = field(default_factory=dict)
    server_view: dict[str, dict[str, float]] = field(default_factory=dict)
    batches: dict[str, dict[int, int]] = field(default_factory=dict)
    memory: dict[str, dict[str, float]] = field(default_factory=dict)
    memory_notes: dict[str, dict[str, Any]] = field(default_factory=dict)
    died: dict[str, str] = field(default_factory=dict)


def capacity_search(contender: Contender, knee_rps: float) -> CapacitySearch:
    """The saturation stage's open-loop capacity search against this server, with its
    kind's spec (`stages.saturation.capacity`): the figure promote and `tune` state."""
    spec = contender.loaded.spec
    sender = LoadSender(spec.stages.latency.request_timeout.seconds)
    return measure_capacity(sender, contender.server, contender.target, spec.stages.saturation,
                            spec.slo, knee_rps, spec.stages.latency.verdict.confidence.fraction)


def best_merged_rps(measured: Measured, kind: str, p99_ms: float,
                    error_rate: float) -> float | None:
    """The highest throughput of a merged load point that met the SLO (the closed-loop
    knee the capacity search starts under); None when none did."""
    passing = [result.throughput for result in measured.merged.get(kind, {}).values()
               if meets_slo(result, p99_ms, error_rate)]
    return max(passing) if passing else None


def meets_slo(result: LoadResult, p99_ms: float, error_rate: float) -> bool:
    return result.completed > 0 and result.percentile_ms(99) <= p99_ms and \
        result.error_rate <= error_rate


def measure(contenders: Mapping[str, Contender], plan: list[Window], window_s: float,
            announce: Callable[[str], None]) -> Measured:
    measured = Measured()
    before: dict[str, ServerStats] = {}
    for kind, contender in contenders.items():
        latency = contender.loaded.spec.stages.latency
        announce(f"{kind}: warm-up at concurrency {latency.concurrency} for {latency.warmup}")
        try:
            contender.window(latency.concurrency, latency.warmup.seconds, "warm-up")
        except ServerError as exc:
            measured.died[kind] = f"during the warm-up: {exc}"
            continue
        before[kind] = contender.server.stats()
    origin = time.monotonic()
    for window in plan:
        if window.kind in measured.died:
            continue
        contender = contenders[window.kind]
        announce(f"window {window.index + 1}/{len(plan)}: {window.kind} at concurrency "
                 f"{window.concurrency} (round {window.round + 1})")
        started = time.monotonic() - origin
        try:
            result = contender.window(window.concurrency, window_s,
                                      f"{window.kind} c={window.concurrency}")
        except ServerError as exc:
            measured.died[window.kind] = str(exc)
            continue
        _keep(measured, contender, window, result, started)
    for kind, server in ((k, c.server) for k, c in contenders.items()):
        if kind in measured.died or not server.alive():
            measured.died.setdefault(kind, server.describe_death())
            continue
        view = server.stats().since(before[kind])
        measured.server_view[kind] = view.window_metrics()
        measured.batches[kind] = dict(view.batch_executions)
        measured.memory[kind], measured.memory_notes[kind] = server_memory(server)
    return measured


def _keep(measured: Measured, contender: Contender, window: Window, result: LoadResult,
          started_s: float) -> None:
    slo = contender.loaded.spec.slo
    summary = result.summary()
    measured.windows.append(WindowResult(
        window.index, window.round, window.kind, window.concurrency, round(started_s, 3),
        summary[m.THROUGHPUT_RPS], summary[m.P50_MS], summary[m.P95_MS], summary[m.P99_MS],
        result.error_rate, int(summary["requests"]),
        meets_slo(result, slo.p99.ms, slo.error_rate.fraction)))
    per_point = measured.merged.setdefault(window.kind, {})
    if window.concurrency not in per_point:
        per_point[window.concurrency] = LoadResult(0.0)
    per_point[window.concurrency].merge(result)
