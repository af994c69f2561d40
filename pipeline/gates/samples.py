"""Latency samples as the verdicts see them: counts above a value, and values at ranks.

A verdict needs two views of a measurement: the pooled distribution (every request, for the
order statistics that bound a percentile) and the blocks it was measured in (consecutive
spans of requests, the units whose spread shows how correlated the requests were). Both are
read through these small protocols, so that the same verdict code judges a real window (an
HDR histogram and its requests in completion order) and a simulated one.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hdrh.histogram import HdrHistogram

from pipeline.measure import histogram_reads
from pipeline.statistics.order_stats import values_at_ranks


class Block(Protocol):
    """A span of requests: how many, and how many took longer than a value."""

    @property
    def requests(self) -> int: ...

    def above(self, value_us: float) -> int: ...


class Pooled(Block, Protocol):
    """Every request of the measurement, with its order statistics."""

    def at_rank(self, rank: int) -> tuple[float, float]:
        """The (lowest, highest) value the 1-based `rank`-th smallest sample can be."""
        ...

    def at_percentile(self, percentile: float) -> float: ...


@dataclass(frozen=True)
class SortedBlock:
    """Latencies (µs) kept sorted: a block of requests, or a whole simulated measurement."""

    values: Sequence[float]

    @classmethod
    def of(cls, values: Sequence[float]) -> SortedBlock:
        return cls(sorted(values))

    @property
    def requests(self) -> int:
        return len(self.values)

    def above(self, value_us: float) -> int:
        return len(self.values) - bisect_right(self.values, value_us)

    def at_rank(self, rank: int) -> tuple[float, float]:
        value = float(self.values[rank - 1])
        return value, value

    def at_percentile(self, percentile: float) -> float:
        if not self.values:
            return 0.0
        rank = max(1, min(len(self.values), round(percentile / 100 * len(self.values) + 0.5)))
        return float(self.values[rank - 1])


@dataclass(frozen=True)
class HistogramSample:
    """An HDR histogram seen as a pooled sample (3 significant digits: a value's bucket
    counts as above `value_us` only when all of it is)."""

    histogram: HdrHistogram

    @property
    def requests(self) -> int:
        return int(self.histogram.get_total_count())

    def above(self, value_us: float) -> int:
        below = 0
        for item in self.histogram.get_recorded_iterator():
            if self.histogram.get_lowest_equivalent_value(item.value_iterated_to) > value_us:
                break
            below += item.count_added_in_this_iter_step
        return self.requests - below

    def at_rank(self, rank: int) -> tuple[float, float]:
        low, high = values_at_ranks(self.histogram, [rank])[0]
        return float(low), float(high)

    def at_percentile(self, percentile: float) -> float:
        return float(histogram_reads.percentiles(self.histogram, [percentile])[percentile])
