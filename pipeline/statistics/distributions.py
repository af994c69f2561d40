"""The few distributions the verdicts need: normal, Student t, and exact binomial bounds.

Computed here rather than taken from scipy (not a dependency): the t quantile by bisection
on a numerically integrated density, the binomial by summing its terms in log space.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from statistics import NormalDist

_NORMAL = NormalDist()


def bisect(before: Callable[[float], bool], low: float, high: float,
           steps: int = 60) -> tuple[float, float]:
    """[low, high] narrowed `steps` times around where `before` turns from true (at low)
    to false (at high)."""
    for _ in range(steps):
        middle = (low + high) / 2
        if before(middle):
            low = middle
        else:
            high = middle
    return low, high


def normal_quantile(p: float) -> float:
    return _NORMAL.inv_cdf(p)


def normal_survival(x: float) -> float:
    """P(Z > x) for a standard normal Z."""
    return 0.5 * math.erfc(x / math.sqrt(2))


def _t_cdf(t: float, df: int) -> float:
    """P(T <= t) for t >= 0 and an integer number of degrees of freedom, exactly
    (Abramowitz and Stegun 26.7.3-4: a finite series in cos(theta), theta =
    atan(t / sqrt(df)))."""
    theta = math.atan(t / math.sqrt(df))
    cos2 = math.cos(theta) ** 2
    if df % 2:
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= cos2 * (2 * k) / (2 * k + 1)
            total += term
        inside = 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    else:
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= cos2 * (2 * k - 1) / (2 * k)
            total += term
        inside = math.sin(theta) * total
    return (1 + inside) / 2


@lru_cache(maxsize=512)
def t_quantile(p: float, df: int) -> float:
    """The p-quantile (p > 0.5) of Student's t with `df` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom {df} must be positive")
    if not 0.5 < p < 1:
        raise ValueError(f"t quantile {p} must be in (0.5, 1)")
    low, high = 0.0, max(2 * normal_quantile(p), 1.0)
    while _t_cdf(high, df) < p:
        high *= 2
    return bisect(lambda t: _t_cdf(t, df) < p, low, high)[1]


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(Bin(n, p) <= k)."""
    if k < 0:
        return 0.0
    if k >= n or p <= 0:
        return 1.0
    if p >= 1:
        return 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
             + i * log_p + (n - i) * log_q for i in range(k + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms))


def _solve(falling: bool, k: int, n: int, level: float) -> float:
    """The p where P(Bin(n, p) <= k) (falling in p) crosses `level`, by bisection."""

    def before(p: float) -> bool:
        value = binomial_cdf(k, n, p) if falling else 1 - binomial_cdf(k - 1, n, p)
        return (value > level) == falling

    low, high = bisect(before, 0.0, 1.0)
    return (low + high) / 2


def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """Exact one-sided bounds (lower, upper) of a binomial proportion, each at level alpha:
    P(p < lower) <= alpha and P(p > upper) <= alpha."""
    if trials <= 0:
        return 0.0, 1.0
    lower = 0.0 if successes == 0 else _solve(False, successes, trials, alpha)
    upper = 1.0 if successes >= trials else _solve(True, successes, trials, alpha)
    return lower, upper


def trials_to_bound_zero(limit: float, alpha: float) -> int:
    """The fewest trials whose exact upper bound with no success is <= `limit`."""
    return math.ceil(math.log(alpha) / math.log1p(-limit))
