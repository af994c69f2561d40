"""Repeat measurement windows until throughput and p99 settle.

A single window can land on a hiccup (a GC pause, a noisy neighbour). The
latency stage runs windows until the last `windows` of them agree within a
tolerance on both throughput and p99, or until a cap; the record says which.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pipeline.load import LoadResult

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
    if len(windows) < count:
        return False
    last = windows[-count:]
    return spread([w.throughput for w in last]) <= tolerance and \
        spread([w.percentile_ms(99) for w in last]) <= tolerance


@dataclass
class Stabilised(Generic[Extra]):
    windows: list[LoadResult] = field(default_factory=list)
    extras: list[Extra] = field(default_factory=list)
    stable: bool = False
    kept: int = 0

    def merged(self) -> LoadResult:
        """The kept (last) windows as one result."""
        kept = self.windows[-self.kept:]
        total = LoadResult(0.0)
        for window in kept:
            total.merge(window)
        return total


def measure_until_stable(window: Callable[[int], tuple[LoadResult, Extra]], count: int,
                         tolerance: float, cap: int) -> Stabilised[Extra]:
    """Run `window(i)` at least `count` times and at most `cap` times."""
    outcome: Stabilised[Extra] = Stabilised()
    for index in range(max(cap, count)):
        result, extra = window(index)
        outcome.windows.append(result)
        outcome.extras.append(extra)
        if settled(outcome.windows, count, tolerance):
            outcome.stable = True
            break
    outcome.kept = min(count, len(outcome.windows))
    return outcome
