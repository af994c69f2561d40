"""What the reports show of a replay, read from the record: the rate the log offered and
the latency in each time bucket (the HTML report's chart), and a one-line summary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline import metric_names as m
from pipeline.record import RunRecord
from pipeline.report.charts import TimePoint
from pipeline.report.views import format_value, ms

STAGE = "replay"


@dataclass(frozen=True)
class ReplayView:
    log: str
    speed: str
    bucket_s: float
    points: list[TimePoint]
    metrics: dict[str, float]
    slo_p99_ms: float | None

    def summary(self) -> str:
        values = self.metrics
        offered = format_value(values.get("offered_rps"), "/s")
        return (f"{self.log} at {self.speed}: {values.get('requests', 0):,.0f} requests over "
                f"{values.get('replay_s', 0):.1f} s ({offered} offered); p50 "
                f"{ms(values.get(m.P50_MS))}, p99 {ms(values.get(m.P99_MS))} from each logged "
                f"instant; {values.get(m.ERRORS, 0):g} errors.")

    def schedule_note(self) -> str:
        note = (f"Client schedule error p99 {ms(self.metrics.get('schedule_lag_p99_ms'))} "
                "(each request's send against its logged time, shifted to the start)")
        if self.metrics.get("client_bound"):
            return note + ": the client fell behind the log, and the latencies include that lag."
        return note + "."


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
                      float(slo) if isinstance(slo, int | float) else None)


def _point(row: dict[str, Any]) -> TimePoint:
    def number(key: str) -> float:
        value = row.get(key)
        return float(value) if isinstance(value, int | float) else 0.0

    return TimePoint(number("start_s"), number("offered_rps"), number(m.P99_MS),
                     number(m.ERRORS))
