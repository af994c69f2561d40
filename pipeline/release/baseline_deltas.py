"""A run record against a baseline (the live release's): which metrics moved, which way is
better, and whether the two runs were measured alike."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from pipeline import metric_names as m
from pipeline.record import RunRecord

DEFAULT_TOLERANCE = 0.10
COMPARED_STAGES = (m.LATENCY_STAGE, m.SATURATION_STAGE)


class Direction(Enum):
    LOWER_IS_BETTER = "lower"
    HIGHER_IS_BETTER = "higher"
    NEUTRAL = "neutral"


# Load settings and counts: they describe how a run was measured, not how well it went.
NEUTRAL_METRICS = frozenset({
    m.CONCURRENCY, m.BATCH_SIZE, "queue_budget_us", "requests", "server_requests",
    m.QUEUE_MEAN_BUDGET_US, "latency_samples", "windows_kept",
    "server_executions", m.SERVER_PROCESSES, m.SERVER_AVG_BATCH_SIZE, "probes",
    m.BURST_RATE_RPS, m.BURST_BASE_RATE_RPS, m.CLIENT_CPU_MS_PER_REQUEST,
})


def metric_direction(name: str) -> Direction:
    if name in NEUTRAL_METRICS:
        return Direction.NEUTRAL
    if "throughput" in name or name.endswith("_rps") or name == m.KNEE_CONCURRENCY:
        return Direction.HIGHER_IS_BETTER
    if name.endswith(("_ms", "_us", "_s", "_mb")) or "error" in name:
        return Direction.LOWER_IS_BETTER
    return Direction.NEUTRAL


@dataclass(frozen=True)
class Delta:
    stage: str
    metric: str
    baseline: float | None
    current: float | None
    direction: Direction
    tolerance: float

    @property
    def change(self) -> float | None:
        """Relative change; ±inf when the baseline was zero and this run is not."""
        if self.baseline is None or self.current is None:
            return None
        if self.baseline == 0:
            return 0.0 if self.current == 0 else math.copysign(math.inf, self.current)
        return (self.current - self.baseline) / abs(self.baseline)

    @property
    def worse_by(self) -> float | None:
        """How much worse this run is, as a fraction (negative when it is better)."""
        change = self.change
        if change is None or self.direction is Direction.NEUTRAL:
            return None
        return change if self.direction is Direction.LOWER_IS_BETTER else -change

    @property
    def regressed(self) -> bool:
        worse = self.worse_by
        return worse is not None and worse > self.tolerance

    @property
    def improved(self) -> bool:
        worse = self.worse_by
        return worse is not None and -worse > self.tolerance

    @property
    def change_text(self) -> str:
        change = self.change
        if change is None:
            return "—"
        if math.isinf(change):
            return "new" if change > 0 else "−∞"
        return f"{change:+.1%}"


def compare(record: RunRecord, baseline: RunRecord,
            tolerance: float = DEFAULT_TOLERANCE) -> list[Delta]:
    deltas: list[Delta] = []
    for stage_name in COMPARED_STAGES:
        now, before = record.metrics(stage_name), baseline.metrics(stage_name)
        names = list(before) + [name for name in now if name not in before]
        deltas.extend(Delta(stage_name, name, before.get(name), now.get(name),
                            metric_direction(name), tolerance) for name in names)
    return deltas


def comparability_note(record: RunRecord, baseline: RunRecord) -> str:
    """Why deltas may not be like for like: the load or the server differ."""
    notes = []
    now, before = record.metrics(m.LATENCY_STAGE), baseline.metrics(m.LATENCY_STAGE)
    for key in (m.CONCURRENCY, m.BATCH_SIZE):
        if key in now and key in before and now[key] != before[key]:
            notes.append(f"latency {key} {before[key]:g} → {now[key]:g}")
    kinds = [item.server.kind for item in (baseline, record)]
    if all(kinds) and kinds[0] != kinds[1]:
        notes.append(f"server {kinds[0]} → {kinds[1]}")
    if not notes:
        return ""
    return "Measured under different conditions (" + "; ".join(notes) + "): not like for like."
