"""Distribution-free confidence bounds for a quantile, from order statistics.

For n independent samples and the q-quantile x_q, the number of samples below
x_q is Binomial(n, q). So the k-th smallest sample X_(k) lies above x_q with
probability P(Bin(n, q) <= k - 1): the upper bound at confidence c is X_(k) for
the smallest k with BinomCDF(k - 1; n, q) >= c, the lower bound X_(k) for the
largest k with BinomCDF(k - 1; n, q) <= 1 - c. No distribution is assumed.
When the samples are independent but not identically distributed (slow drift),
the count below the mixture's quantile is Poisson-binomial, which is less
spread than the binomial, so the bounds stay conservative.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hdrh.histogram import HdrHistogram

# The fewest samples for which each percentile is reported (fewer: a "thin" percentile).
MIN_SAMPLES_FOR = {"p50": 2, "p90": 10, "p95": 20, "p99": 100, "p999": 1000}
# Binomial mass this far below the largest term is negligible for any bound we take.
_NEGLIGIBLE = 1e-18


def _cdf_span(n: int, q: float) -> tuple[int, list[float]]:
    """(first, cdf): cdf[i] = P(Bin(n, q) <= first + i) over the span that holds the mass.

    Walks out from the mode with the pmf ratio, so it costs O(sqrt(n)) and never
    underflows; outside the span the CDF is 0 below and 1 above.
    """
    mode = min(n, math.floor((n + 1) * q))
    ratio_up = q / (1 - q)
    above = [1.0]
    k = mode
    while k < n and above[-1] > _NEGLIGIBLE:
        above.append(above[-1] * (n - k) / (k + 1) * ratio_up)
        k += 1
    below: list[float] = []
    term, k = 1.0, mode
    while k > 0 and term > _NEGLIGIBLE:
        term = term * k / (n - k + 1) / ratio_up
        below.append(term)
        k -= 1
    pmf = below[::-1] + above
    total = math.fsum(pmf)
    cdf, running = [], 0.0
    for value in pmf:
        running += value
        cdf.append(min(running / total, 1.0))
    return mode - len(below), cdf


def quantile_ranks(n: int, q: float, confidence: float) -> tuple[int, int]:
    """1-based ranks (lower, upper) of the order statistics that bound the q-quantile.

    lower is 0 when no sample is a lower bound at this confidence, upper is n + 1
    when no sample is an upper bound (too few samples for that quantile).
    """
    if n <= 0:
        return 0, 1
    if not 0 < q < 1 or not 0.5 <= confidence < 1:
        raise ValueError(f"quantile {q} and confidence {confidence} must be in (0, 1)")
    first, cdf = _cdf_span(n, q)
    upper, lower = n + 1, 0
    for index, value in enumerate(cdf):
        rank = first + index + 1  # cdf[index] = P(Bin <= rank - 1)
        if value <= 1 - confidence:
            lower = rank
        if value >= confidence and upper == n + 1:
            upper = rank
    if first > 0 and lower == 0:
        lower = first  # the CDF below the span is ~0 <= 1 - c
    return min(lower, n), min(upper, n + 1)


def samples_for_upper_bound(q: float, confidence: float, spare: int = 2) -> int:
    """The fewest samples whose q-quantile has an upper bound at `confidence` that is not
    among the `spare` largest samples (with fewer, one outlier decides the bound)."""
    n = 1
    while quantile_ranks(n, q, confidence)[1] > n - spare:
        n += 1
    return n


def values_at_ranks(histogram: HdrHistogram, ranks: Sequence[int]) -> list[tuple[int, int]]:
    """For each 1-based rank, the (lowest, highest) value its histogram bucket can hold.

    An HDR histogram keeps 3 significant digits: take the lowest for a lower bound and
    the highest for an upper bound, so that the resolution only ever widens an interval.
    """
    wanted = sorted(set(ranks))
    found: dict[int, tuple[int, int]] = {}
    total, position = 0, 0
    for index in range(histogram.counts_len):
        count = histogram.get_count_at_index(index)
        if not count:
            continue
        total += count
        value = histogram.get_value_from_index(index)
        while position < len(wanted) and wanted[position] <= total:
            found[wanted[position]] = (histogram.get_lowest_equivalent_value(value),
                                       histogram.get_highest_equivalent_value(value))
            position += 1
        if position == len(wanted):
            break
    return [found[rank] for rank in ranks]


def quantile_interval_us(histogram: HdrHistogram, q: float,
                         confidence: float) -> tuple[int | None, int | None]:
    """(low, high) µs bounding the q-quantile of the recorded samples; None = no bound."""
    n = int(histogram.get_total_count())
    lower, upper = quantile_ranks(n, q, confidence)
    low = values_at_ranks(histogram, [lower])[0][0] if 1 <= lower <= n else None
    high = values_at_ranks(histogram, [upper])[0][1] if 1 <= upper <= n else None
    return low, high
