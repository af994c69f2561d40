"""Whether measurement windows agreed.

The loop that repeats windows until the verdict is decided is pipeline.statistics.sequential;
windows merged into one result are `pipeline.measure.load_result.merge_windows`.
Whether throughput and p99 agreed across all windows (`settled`) is recorded as
"stabilised"; it is a description of the run, not a gate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Window(Protocol):
    """A measurement window as `settled` reads it (`pipeline.measure.load_result.LoadResult`)."""

    @property
    def throughput(self) -> float: ...

    def percentile_ms(self, percentile: float) -> float: ...


def spread(values: list[float]) -> float:
    """(max - min) / mean; 0 for identical values, inf when the mean is 0 but they differ."""
    if not values:
        return 0.0
    mean = sum(values) / len(values)
    if mean == 0:
        return 0.0 if max(values) == min(values) else float("inf")
    return (max(values) - min(values)) / mean


def settled(windows: Sequence[Window], count: int, tolerance: float) -> bool:
    """The last `count` windows agree on throughput and p99 within `tolerance`."""
    if len(windows) < count:
        return False
    last = windows[-count:]
    return spread([w.throughput for w in last]) <= tolerance and \
        spread([w.percentile_ms(99) for w in last]) <= tolerance
