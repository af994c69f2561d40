"""Error rates of two servers compared by their counts, never by a ratio of rates.

A ratio of two small rates is undefined at 0 errors and explodes at one (0 -> 1 in
8,000 requests reads "+inf worse"). Counts answer the question instead, two ways:
- relative: given the E errors of both servers together, the candidate's share is
  Binomial(E, pi) with pi = n_c rho / (n_c rho + n_l), rho the ratio of the true rates;
  the exact (Clopper-Pearson) bounds of pi give exact bounds of rho;
- absolute: Clopper-Pearson bounds of each rate give bounds of their difference.
A regression needs both: the ratio surely beyond 1 + margin AND the difference surely
beyond the absolute allowance (`stages.regression.error_rate_margin`), each bound at
the look's error. Anything short of that is no regression: a rare-event rate cannot be
shown equal in a run of a minute (0 errors in 4,000 requests bounds the rate only
below 0.15%), so demanding proof would leave every run inconclusive. The candidate's
own error rate is bounded by the SLO's gate (latency.error_rate); this check refuses a
candidate that is surely worse than the live release, and says whether the counts also
showed it within the margins or only not beyond them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.regression.outcome import Outcome
from pipeline.statistics.distributions import bisect


def _log_pmf(n: int, k: int, p: float) -> float:
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
            + k * math.log(p) + (n - k) * math.log1p(-p))


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(Bin(n, p) <= k)."""
    if k >= n or p <= 0.0:
        return 1.0
    if k < 0 or p >= 1.0:
        return 0.0
    return min(1.0, math.fsum(math.exp(_log_pmf(n, i, p)) for i in range(k + 1)))


def _bisect(decreasing: Callable[[float], float], target: float) -> float:
    """The p in [0, 1] where the decreasing function crosses `target`."""
    low, high = bisect(lambda p: decreasing(p) > target, 0.0, 1.0)
    return (low + high) / 2


def rate_bounds(errors: int, requests: int, error: float) -> tuple[float, float]:
    """Clopper-Pearson bounds of a rate, each side wrong with probability <= `error`."""
    if requests <= 0:
        return 0.0, 1.0
    # P(Bin <= k) falls as p grows: the lower bound is where P(Bin >= errors) reaches
    # `error`, the upper where P(Bin <= errors) does.
    low = 0.0 if errors == 0 else _bisect(
        lambda p: binomial_cdf(errors - 1, requests, p), 1 - error)
    high = 1.0 if errors >= requests else _bisect(
        lambda p: binomial_cdf(errors, requests, p), error)
    return low, high


def _as_ratio(share: float, candidate_requests: int, live_requests: int) -> float:
    if share >= 1.0:
        return math.inf
    return share * live_requests / (candidate_requests * (1 - share))


@dataclass(frozen=True)
class ErrorComparison:
    outcome: Outcome
    candidate_rate: float
    live_rate: float
    ratio_low: float
    ratio_high: float          # inf when the counts cannot bound it
    difference_low: float
    difference_high: float
    reason: str


def compare_errors(candidate: tuple[int, int], live: tuple[int, int], margin: float,
                   allowance: float, error: float) -> ErrorComparison:
    """`candidate`, `live`: (errors, requests); `error`: per-side error of this look."""
    (c_errors, c_requests), (l_errors, l_requests) = candidate, live
    if c_requests <= 0 or l_requests <= 0:
        return ErrorComparison("inconclusive", 0.0, 0.0, 0.0, math.inf, -1.0, 1.0,
                               "no requests measured on one side")  # fail closed
    half = error / 2
    total = c_errors + l_errors
    share_low, share_high = rate_bounds(c_errors, total, half) if total else (0.0, 1.0)
    ratio_low = _as_ratio(share_low, c_requests, l_requests)
    ratio_high = _as_ratio(share_high, c_requests, l_requests)
    c_low, c_high = rate_bounds(c_errors, c_requests, half / 2)
    l_low, l_high = rate_bounds(l_errors, l_requests, half / 2)
    low, high = c_low - l_high, c_high - l_low
    counts = f"{c_errors}/{c_requests} vs {l_errors}/{l_requests} errors"
    outcome: Outcome = "no_regression"
    if ratio_low > 1 + margin and low > allowance:
        outcome, reason = "regression", (f"{counts}: surely over {margin:.0%} relative and "
                                         f"{allowance:.3%} absolute above the live release")
    elif ratio_high <= 1 + margin or high <= allowance:
        reason = (f"{counts}: within {margin:.0%} relative or {allowance:.3%} absolute of "
                  "the live release")
    else:
        reason = f"{counts}: not surely worse than the live release"
    return ErrorComparison(outcome, c_errors / c_requests, l_errors / l_requests,
                           ratio_low, ratio_high, low, high, reason)
