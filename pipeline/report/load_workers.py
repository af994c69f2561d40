"""The load workers of a sharded run (details.load_workers), read defensively."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.record import RunRecord
from pipeline.stage_result import finite

STAGES = ("latency", "replay", "saturation")


@dataclass(frozen=True)
class WorkerLine:
    stage: str
    worker: str
    host: str
    requests: float | None
    lag_p99_ms: float | None       # None: a closed loop (no schedule)
    cpu_s: float | None
    client_bound: bool

    def cells(self) -> list[str]:
        lag = "—" if self.lag_p99_ms is None else f"{self.lag_p99_ms:.2f} ms"
        return [self.stage, self.worker, self.host,
                "—" if self.requests is None else f"{self.requests:,.0f}", lag,
                "—" if self.cpu_s is None else f"{self.cpu_s:.2f} s",
                "BEHIND" if self.client_bound else "kept up"]


HEADERS = ["stage", "worker", "host", "requests", "lag p99", "CPU", "schedule"]


def worker_lines(record: RunRecord) -> list[WorkerLine]:
    lines = []
    for stage in STAGES:
        rows = record.details(stage).get("load_workers")
        for row in rows if isinstance(rows, list) else []:
            if isinstance(row, dict):
                lines.append(_line(stage, row))
    return lines


def _line(stage: str, row: dict[str, Any]) -> WorkerLine:
    return WorkerLine(stage, str(row.get("worker", "?")), str(row.get("host", "?")),
                      finite(row.get("requests")), finite(row.get("lag_p99_ms")),
                      finite(row.get("cpu_s")), row.get("client_bound") is True)
