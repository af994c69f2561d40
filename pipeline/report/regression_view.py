"""What the side-by-side regression check decided, read from the record (its stage)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.record import RunRecord
from pipeline.regression.gates import is_same_release

OUTCOME_TEXT = {"no_regression": "no regression", "regression": "regression",
                "inconclusive": "inconclusive"}
LABELS = {"p99_ms": "p99 (ms)", "p95_ms": "p95 (ms)", "p50_ms": "p50 (ms)",
          "error_rate": "error rate", "throughput_rps": "throughput (/s)"}


@dataclass(frozen=True)
class WatchedRow:
    metric: str
    live: str
    candidate: str
    ratio: str
    interval: str
    limit: str
    outcome: str


@dataclass(frozen=True)
class SideBySideView:
    release_id: str
    outcome: str
    margin: float
    rounds: int
    same_bytes: bool
    rows: list[WatchedRow]
    windows: list[dict[str, Any]]


def _number(value: Any, metric: str) -> str:
    if not isinstance(value, int | float):
        return "—"
    return f"{value:.3%}" if metric == "error_rate" else f"{value:.4g}"


def _ratio(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, int | float) else "—"


def _row(body: dict[str, Any]) -> WatchedRow:
    metric = str(body.get("metric"))
    low, high = body.get("ratio_low"), body.get("ratio_high")
    interval = f"[{_ratio(low)}, {_ratio(high) if high is not None else '∞'}]"
    return WatchedRow(LABELS.get(metric, metric), _number(body.get("live"), metric),
                      _number(body.get("candidate"), metric), _ratio(body.get("ratio")),
                      interval, _ratio(body.get("limit")),
                      OUTCOME_TEXT.get(str(body.get("outcome")), str(body.get("outcome"))))


def side_by_side(record: RunRecord) -> SideBySideView | None:
    """None when the run measured no live release side by side."""
    stage = next((s for s in record.stages if s.name == "regression"), None)
    verdict = stage.details.get("verdict") if stage is not None else None
    if stage is None or not isinstance(verdict, dict):
        return None
    same = stage.details.get("same") or {}
    windows = stage.details.get("windows")
    return SideBySideView(
        str(stage.details.get("live_release_id") or "—"),
        OUTCOME_TEXT.get(str(verdict.get("outcome")), str(verdict.get("outcome"))),
        float(verdict.get("margin") or 0.0), int(verdict.get("rounds") or 0),
        is_same_release(same),
        [_row(body) for body in verdict.get("metrics") or [] if isinstance(body, dict)],
        [w for w in windows if isinstance(w, dict)] if isinstance(windows, list) else [])
