"""What a load worker reports, in a form that crosses processes, and its exact merge.

HDR histograms travel encoded (hdrh's compressed form) and add bucket by bucket, so the
merged percentiles are those of one histogram that recorded every worker's requests.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram

from pipeline.measure.load_result import LoadResult, new_histogram
from pipeline.measure.open_loop import OpenLoopResult


def encode(histogram: HdrHistogram) -> bytes:
    return bytes(histogram.encode())


def decode(encoded: bytes) -> HdrHistogram:
    merged = new_histogram()
    merged.add(HdrHistogram.decode(encoded))
    return merged


@dataclass(frozen=True)
class SentResult:
    """A LoadResult as it crosses from a worker to the coordinator."""

    duration_s: float
    histogram: bytes
    completed: int
    errors: dict[str, int]
    client_cpu_s: float
    sizes: dict[str, bytes] = field(default_factory=dict)

    @classmethod
    def of(cls, result: LoadResult) -> SentResult:
        return cls(result.duration_s, encode(result.histogram), result.completed,
                   dict(result.errors), result.client_cpu_s,
                   {size: encode(histogram) for size, histogram in result.sizes.items()})

    def load_result(self) -> LoadResult:
        return LoadResult(self.duration_s, decode(self.histogram), self.completed,
                          Counter(self.errors), self.client_cpu_s,
                          sizes={size: decode(encoded) for size, encoded in self.sizes.items()})


@dataclass(frozen=True)
class WorkerOpenLoop:
    """One worker's share of an open-loop window."""

    worker: int
    pid: int
    host: str
    phases: dict[str, SentResult]
    from_send: SentResult
    lag: bytes
    drain_s: float
    client_bound: bool
    lingered_s: float
    unsettled: int


@dataclass(frozen=True)
class WorkerClosedLoop:
    worker: int
    pid: int
    host: str
    result: SentResult


def merge_parallel(results: list[LoadResult]) -> LoadResult:
    """Results of one window measured side by side: counts and CPU add, the window's length
    is the longest worker's (LoadResult.merge adds lengths: windows one after another)."""
    merged = LoadResult(max((result.duration_s for result in results), default=0.0))
    for result in results:
        merged.histogram.add(result.histogram)
        merged.add_sizes(result.sizes)
        merged.completed += result.completed
        merged.errors.update(result.errors)
        merged.client_cpu_s += result.client_cpu_s
    return merged


def lag_p99_us(lag: HdrHistogram) -> float:
    return float(lag.get_value_at_percentile(99)) if lag.get_total_count() else 0.0


def merge_open_loop(reports: list[WorkerOpenLoop]) -> tuple[OpenLoopResult, list[dict[str, Any]]]:
    """The window as one client would have measured it, and a row per worker."""
    if not reports:
        raise ValueError("no worker reported")
    names = list(reports[0].phases)
    phases = {name: merge_parallel([r.phases[name].load_result() for r in reports])
              for name in names}
    lag = new_histogram()
    rows = []
    for report in sorted(reports, key=lambda r: r.worker):
        own_lag = decode(report.lag)
        lag.add(own_lag)
        rows.append(worker_row(report.worker, report.host, report.pid,
                               report.from_send.load_result(), lag_p99_us(own_lag),
                               report.client_bound))
    merged = OpenLoopResult(
        phases=phases,
        drain_s=max(report.drain_s for report in reports),
        lag_p99_us=lag_p99_us(lag),
        client_bound=any(report.client_bound for report in reports),
        from_send=merge_parallel([report.from_send.load_result() for report in reports]),
        lingered_s=max(report.lingered_s for report in reports),
        unsettled=sum(report.unsettled for report in reports),
        workers=rows,
        lag=lag,
    )
    return merged, rows


def merge_closed_loop(reports: list[WorkerClosedLoop]) -> tuple[LoadResult, list[dict[str, Any]]]:
    if not reports:
        raise ValueError("no worker reported")
    results = [report.result.load_result() for report in reports]
    rows = [worker_row(report.worker, report.host, report.pid, result, None, False)
            for report, result in zip(reports, results, strict=True)]
    return merge_parallel(results), rows


def worker_row(worker: int, host: str, pid: int, result: LoadResult, lag_us: float | None,
               client_bound: bool) -> dict[str, Any]:
    """One worker's line in the record (`load_workers`); a closed loop has no schedule, so
    no lag."""
    return {"worker": worker, "host": host, "pid": pid,
            "requests": result.completed + result.error_count,
            "lag_p99_ms": None if lag_us is None else lag_us / 1e3,
            "cpu_s": result.client_cpu_s, "client_bound": client_bound}


def behind(rows: list[dict[str, Any]]) -> list[str]:
    """The workers that fell behind their schedule, named for a message."""
    return [f"worker {row['worker']} (lag p99 {row['lag_p99_ms']:.1f}ms)"
            for row in rows if row["client_bound"]]


def combine_rows(windows: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A stage's rows per worker over all its windows: requests and CPU add up, the lag
    is the worst window's p99, and a worker is client-bound if it was in any window."""
    combined: dict[int, dict[str, Any]] = {}
    for rows in windows:
        for row in rows:
            into = combined.setdefault(row["worker"], {**row, "requests": 0, "cpu_s": 0.0,
                                                       "lag_p99_ms": None,
                                                       "client_bound": False, "windows": 0})
            into["requests"] += row["requests"]
            into["cpu_s"] += row["cpu_s"]
            into["windows"] += 1
            into["host"], into["pid"] = row["host"], row["pid"]
            into["client_bound"] = into["client_bound"] or row["client_bound"]
            if row["lag_p99_ms"] is not None:
                into["lag_p99_ms"] = max(into["lag_p99_ms"] or 0.0, row["lag_p99_ms"])
    return [combined[worker] for worker in sorted(combined)]
