"""What the reports show of a replay, read from the record: the rate the log offered and
the latency in each time bucket (the HTML report's chart; the text reports' table of a few
intervals), how closely the client kept the schedule, the replay's gates, and a one-line
summary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipeline import metric_names as m
from pipeline.record import RunRecord
from pipeline.report.charts import TimePoint
from pipeline.report.views import GateRow, format_value, gate_rows, ms

STAGE = "replay"
SERIES_ROWS = 12
"""The text reports show the replay over time in at most this many intervals."""


@dataclass(frozen=True)
class Interval:
    """Consecutive time buckets of a replay: their span (s), the rate the log offered over
    them, the highest p99 among them (the record holds each bucket's p99, not a merged
    one) and their errors."""

    start_s: float
    end_s: float
    offered_rps: float
    worst_p99_ms: float
    errors: float


def intervals(points: Sequence[TimePoint], bucket_s: float,
              most: int = SERIES_ROWS) -> list[Interval]:
    """The buckets merged into at most `most` intervals of consecutive buckets, as evenly
    as their count allows."""
    size = max(1, -(-len(points) // most))
    groups = [points[start:start + size] for start in range(0, len(points), size)]
    return [Interval(group[0].start_s, group[-1].start_s + bucket_s,
                     sum(point.offered_rps for point in group) / len(group),
                     max(point.p99_ms for point in group),
                     sum(point.errors for point in group))
            for group in groups]


@dataclass(frozen=True)
class ReplayView:
    log: str
    speed: str
    bucket_s: float
    points: list[TimePoint]
    metrics: dict[str, float]
    slo_p99_ms: float | None
    gates: list[GateRow]

    def summary(self) -> str:
        values = self.metrics
        rates = f"{format_value(values.get('offered_rps'), '/s')} offered"
        if m.THROUGHPUT_RPS in values:
            rates += f", {format_value(values[m.THROUGHPUT_RPS], '/s')} achieved"
        return (f"{self.log} at {self.speed}: {values.get('requests', 0):,.0f} requests over "
                f"{values.get('replay_s', 0):.1f} s ({rates}); p50 "
                f"{ms(values.get(m.P50_MS))}, p99 {ms(values.get(m.P99_MS))} from each logged "
                f"instant; {_errors(values.get(m.ERRORS, 0))}.")

    def schedule_note(self) -> str:
        note = f"Client schedule error p99 {ms(self.metrics.get('schedule_lag_p99_ms'))}"
        if "schedule_lag_max_ms" in self.metrics:
            note += f", max {ms(self.metrics['schedule_lag_max_ms'])}"
        note += " (each request's send against its logged time, shifted to the start)"
        if self.metrics.get("client_bound"):
            return note + ": the client fell behind the log, and the latencies include that lag."
        return note + "."

    def series(self) -> list[Interval]:
        return intervals(self.points, self.bucket_s)


def replay(record: RunRecord) -> ReplayView | None:
    """The replay stage's view; None where it did not run."""
    details = record.details(STAGE)
    rows = details.get("over_time")
    if not isinstance(rows, list) or not rows:
        return None
    gate = record.gate(f"{STAGE}.p99")
    slo = gate.threshold if gate is not None else None
    return ReplayView(str(details.get("log", "")), str(details.get("speed", "")),
                      float(details.get("bucket_s", 1.0)),
                      [_point(row) for row in rows if isinstance(row, dict)],
                      record.metrics(STAGE),
                      float(slo) if isinstance(slo, int | float) else None,
                      [row for row in gate_rows(record) if row.stage == STAGE])


def _point(row: dict[str, Any]) -> TimePoint:
    def number(key: str) -> float:
        value = row.get(key)
        return float(value) if isinstance(value, int | float) else 0.0

    return TimePoint(number("start_s"), number("offered_rps"), number(m.P99_MS),
                     number(m.ERRORS))


def _errors(count: float) -> str:
    return f"{count:g} error" if count == 1 else f"{count:g} errors"
