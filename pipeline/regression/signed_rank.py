"""The Hodges-Lehmann interval for the median of paired differences (Wilcoxon signed rank).

With n paired differences d_i, the Walsh averages (d_i + d_j) / 2 (i <= j) number
M = n(n + 1) / 2. Under "the differences are symmetric about theta", the count of Walsh
averages above theta is the signed-rank statistic W+, whose null distribution is exact
and free of any other assumption: each of the 2^n sign patterns is equally likely. So
the k-th smallest Walsh average is a lower bound for theta with error P(W+ <= k - 1),
and the k-th largest an upper bound with the same error. Ties have probability zero
for continuous measurements; they only make the bounds slightly conservative.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@functools.cache
def _signed_rank_cdf(n: int) -> tuple[float, ...]:
    """cdf[w] = P(W+ <= w) for n differences, from the exact count of sign patterns."""
    counts = [1]
    for rank in range(1, n + 1):
        grown = counts + [0] * rank
        for total, ways in enumerate(counts):
            grown[total + rank] += ways
        counts = grown
    patterns = 2.0 ** n
    cdf, running = [], 0
    for ways in counts:
        running += ways
        cdf.append(running / patterns)
    return tuple(cdf)


def bound_rank(n: int, error: float) -> int:
    """The largest k with P(W+ <= k - 1) <= error; 0 when even the extreme Walsh average
    is not a bound at that error (too few differences)."""
    k = 0
    for w, probability in enumerate(_signed_rank_cdf(n)):
        if probability > error:
            break
        k = w + 1
    return k


@dataclass(frozen=True)
class MedianInterval:
    """The Hodges-Lehmann estimate and its bounds; a side is None when n is too small."""

    estimate: float
    low: float | None
    high: float | None


def median_interval(differences: Sequence[float], error: float) -> MedianInterval:
    """Estimate and bounds, each side wrong with probability at most `error`."""
    if not differences:
        raise ValueError("no differences to bound")
    walsh = sorted((a + b) / 2 for i, a in enumerate(differences)
                   for b in differences[i:])
    k = bound_rank(len(differences), error)
    if k == 0:
        return MedianInterval(statistics.median(walsh), None, None)
    return MedianInterval(statistics.median(walsh), walsh[k - 1], walsh[-k])
