"""Repeat measurement windows until the verdict is decided, or up to a cap.

A single window can land on a hiccup (a GC pause, a noisy neighbour). The
latency stage runs at least `min_windows` windows and then stops as soon as
its gates are decided (pipeline.verdict); after `max_windows` it stops anyway
and an undecided gate is inconclusive. Every window after the warm-up counts:
none is dropped for disagreeing with the others. Whether throughput and p99
agreed across all windows (`settled`) is recorded as "stabilised".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pipeline.measure.loadgen import LoadResult

Extra = TypeVar("Extra")


def spread(values: list[float]) -> float:
    """(max - min) / mean; 0 for identical values, inf when the mean is 0 but they differ."""
    if not values:
        return 0.0
    mean = sum(values) / len(values)
    if mean == 0:
        return 0.0 if max(values) == min(values) else float("inf")
    return (max(values) - min(values)) / mean


def settled(windows: list[LoadResult], count: int, tolerance: float) -> bool:
    """The last `count` windows agree on throughput and p99 within `tolerance`."""
    if len(windows) < count:
        return False
    last = windows[-count:]
    return spread([w.throughput for w in last]) <= tolerance and \
        spread([w.percentile_ms(99) for w in last]) <= tolerance


def merge(windows: list[LoadResult]) -> LoadResult:
    total = LoadResult(0.0)
    for window in windows:
        total.merge(window)
    return total


@dataclass
class Measured(Generic[Extra]):
    windows: list[LoadResult] = field(default_factory=list)
    extras: list[Extra] = field(default_factory=list)
    decided: bool = False

    def merged(self) -> LoadResult:
        """Every measured window as one result."""
        return merge(self.windows)

    def stable(self, tolerance: float) -> bool:
        return settled(self.windows, len(self.windows), tolerance)


def measure_until_decided(window: Callable[[int], tuple[LoadResult, Extra]],
                          decided: Callable[[list[LoadResult]], bool],
                          min_windows: int, max_windows: int) -> Measured[Extra]:
    """Run `window(i)` at least `min_windows` times, then until `decided`, at most
    `max_windows` times."""
    outcome: Measured[Extra] = Measured()
    for index in range(max(max_windows, min_windows)):
        result, extra = window(index)
        outcome.windows.append(result)
        outcome.extras.append(extra)
        if len(outcome.windows) >= min_windows and decided(outcome.windows):
            outcome.decided = True
            break
    return outcome
