"""The capacity search as the reports show it, read defensively from a run record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline import metric_names as m
from pipeline.record import RunRecord
from pipeline.report.views import format_value, ms, number
from pipeline.statistics.capacity_figure import CapacityFigure


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


@dataclass(frozen=True)
class CapacityStep:
    rate_rps: float
    p99_ms: float
    samples: float
    verdict: str
    reason: str


@dataclass(frozen=True)
class Capacity:
    """The open-loop search for the highest sustainable arrival rate."""

    rate_rps: float | None
    p99_ms: float | None
    bound: str
    interval_rps: tuple[float | None, float | None]
    stop_reason: str
    steps: list[CapacityStep]
    capped_by: str = ""     # what kept a lower bound from going higher (newer records)

    @property
    def lower_bound(self) -> bool:
        return self.bound == "lower"

    def headline(self) -> str:
        if self.rate_rps is None:
            if self.bound == "unknown":
                return "Capacity unknown: no rate was confirmed within the budget."
            return "No open-loop rate met the SLO."
        rate = format_value(self.rate_rps, "/s")
        if self.lower_bound:
            capped = f", capped by {self.capped_by}" if self.capped_by else ""
            return f"Capacity ≥ {rate} (lower bound{capped}) at p99 {ms(self.p99_ms)}."
        return f"Capacity {rate} at p99 {ms(self.p99_ms)}."

    def summary(self) -> str:
        low, high = self.interval_rps
        text = self.headline()
        if high is not None and low is not None:
            text += (f" Bisected between {format_value(low, '/s')} (met) and "
                     f"{format_value(high, '/s')} (missed).")
        elif self.lower_bound:
            text += " No failing rate was found above it."
        if self.stop_reason:
            text += f" Stopped: {self.stop_reason}."
        return text


def _reason(step: Mapping[str, Any]) -> str:
    """The verdict's reason, saying which step was the confirmation hold and what the
    wait for the backlog to drain afterwards took."""
    reason = str(step.get("reason") or "")
    duration = number(step.get("duration_s"))
    if step.get("hold") is True and duration is not None:
        reason = f"hold {duration:g}s: {reason}"
    settle = (number(step.get("lingered_s")) or 0.0) + (number(step.get("settle_s")) or 0.0)
    if settle:
        reason += f"; backlog drained {settle:.2f}s after"
    return reason


def capacity(record: RunRecord) -> Capacity | None:
    values, info = record.metrics(m.SATURATION_STAGE), record.details(m.SATURATION_STAGE)
    raw_steps = _items(info.get("capacity_steps"))
    if not raw_steps and m.CAPACITY_RPS not in values:
        return None
    steps = []
    for raw in raw_steps:
        step = raw if isinstance(raw, dict) else {}
        rate, p99 = number(step.get("rate_rps")), number(step.get(m.P99_MS))
        if rate is not None and p99 is not None:
            steps.append(CapacityStep(rate, p99, number(step.get("samples")) or 0.0,
                                      str(step.get("verdict") or "?"), _reason(step)))
    interval = [*_items(info.get("capacity_interval_rps")), None, None]
    figure = CapacityFigure.from_json(info.get("capacity"))
    return Capacity(values.get(m.CAPACITY_RPS), values.get(m.CAPACITY_P99_MS),
                    str(info.get("capacity_bound") or "none"),
                    (number(interval[0]), number(interval[1])),
                    str(info.get("capacity_stop_reason") or ""), steps,
                    figure.capped_by if figure else "")
