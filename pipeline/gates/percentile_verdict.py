"""Percentile verdicts: passed, failed or inconclusive, each with its interval.

The unit of evidence. Requests are not independent draws: the 8 requests of one
dynamically formed batch share most of their latency, and requests close in time share the
machine's state (a GC pause, a busy neighbour, a slow drift). An order-statistic bound over
all requests that assumes independence is then far too narrow. So each measurement window is
cut into consecutive blocks of requests (pipeline.gates.evidence), and the bound is the
distribution-free order-statistic bound of pipeline.statistics.order_stats computed with an
*effective sample size*: n_eff = n / d, where d, the design effect, is the variance between
blocks of the fraction of requests slower than the threshold, divided by what independent
requests would give (a cluster-sampling estimate; d = 8 for batches of 8 sharing a latency,
far more for a slow drift). The estimate of d is itself noisy (one degree of freedom per
block), so it is scaled by (t_{B-1} / z)^2 for B blocks. It is also skewed, and low exactly
when the sample is low: a run that missed the slow spells of a drift, or the rare stall,
shows fewer slow requests *and* less spread between blocks. Two guards keep the coverage
(measured by benchmarks/calibration.py): where the threshold lies in the tail the bound
looks at (a quarter of the percentile's share of requests or more above it), d is also
estimated at the pooled value with 1.5 times that share above it (the p98.5 for a p99:
half again as many requests, so a drift's clusters show even when the tail itself saw
few), and the larger estimate is used; and d is never taken below 2
(`MIN_DESIGN_EFFECT`: closed-loop requests in flight together share the machine; a clear
pass still needs only a few thousand requests).

Why this and not a t interval over window percentiles: the gate is about the percentile of
all requests (the mixture over the run), which the mean of per-window percentiles
underestimates when windows differ; and with the 3 to 6 windows a stage runs, a t interval
over windows is too wide to pass anything. The pooled order statistic keeps the right
target, the design effect restores its coverage, and the blocks give it enough degrees of
freedom. The assumption left: blocks are longer than the span over which requests are
correlated (a block holds hundreds of requests; a drift slower than a block is seen as
between-block spread, which is what it should be).

Decision: pass when the upper bound meets the threshold, fail when the lower bound misses
it, inconclusive otherwise, with the number of requests that would roughly decide it: the
fewest at which these same bounds would decide, were the requests like those measured
(none when not even `PRACTICAL_GROWTH` times as many would).

Instability is a test of its own, not "every window agrees": a window whose fraction of
requests above the pooled percentile is too far from the other windows' (a z test with the
other windows' design effect, Bonferroni over the windows, at `instability_level`) is named
as an outlier; the sequential loop (pipeline.statistics.sequential) re-measures it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pipeline.gates.samples import Block, Pooled
from pipeline.statistics.distributions import normal_quantile, t_quantile
from pipeline.statistics.order_stats import quantile_ranks

Outcome = Literal["passed", "failed", "inconclusive"]
OUTCOMES: tuple[Outcome, ...] = ("passed", "failed", "inconclusive")
# Never more than one independent unit of evidence per this many requests (see the module
# doc), and the design effect is also estimated where this many times the percentile's
# tail lies above (the p98.5 for a p99), from half again as many requests.
MIN_DESIGN_EFFECT = 2.0
WIDER_TAIL = 1.5
NEAR_TAIL = 0.25
PRACTICAL_GROWTH = 100
"""An undecided verdict that this many times its requests would not decide either sits at
its threshold: no practical measurement decides it."""


def per_look_confidence(confidence: float, looks: int) -> float:
    """The confidence of each look such that all `looks` together keep `confidence`."""
    return 1 - (1 - confidence) / max(looks, 1)


@dataclass(frozen=True)
class Evidence:
    """One percentile's evidence: every request pooled, the blocks of each window, and each
    window's own value of the percentile (ms, for the record)."""

    pooled: Pooled
    windows: tuple[tuple[Block, ...], ...]
    window_ms: tuple[float, ...]

    @property
    def blocks(self) -> list[Block]:
        return [block for window in self.windows for block in window]


@dataclass(frozen=True)
class Outlier:
    window: int          # 0-based index among the windows judged
    z: float
    critical: float


@dataclass(frozen=True)
class PercentileVerdict:
    percentile: float
    outcome: Outcome
    observed_ms: float
    low_ms: float | None
    high_ms: float | None
    samples: int
    window_ms: tuple[float, ...]
    reason: str
    design_effect: float = 1.0
    effective_samples: float = 0.0
    more_requests: int | None = None
    outlier: Outlier | None = None


def design_effect(blocks: Sequence[Block], value_us: float) -> float:
    """Between-block variance of the fraction above `value_us` over the binomial one."""
    counts = [(block.requests, block.above(value_us)) for block in blocks if block.requests]
    total = sum(n for n, _ in counts)
    above = sum(x for _, x in counts)
    if len(counts) < 2 or above in (0, total):
        return 1.0
    share = above / total
    between = len(counts) / (len(counts) - 1) * math.fsum(
        (x - share * n) ** 2 for n, x in counts) / total**2
    return between / (share * (1 - share) / total)


def widened_design_effect(blocks: Sequence[Block], value_us: float, alpha: float) -> float:
    """The design effect at `value_us`, widened for its own noise (B - 1 degrees of freedom)
    for a bound at level alpha."""
    count = sum(1 for block in blocks if block.requests)
    if count < 2:
        return 1.0
    widen = (t_quantile(1 - alpha, count - 1) / normal_quantile(1 - alpha)) ** 2
    return design_effect(blocks, value_us) * widen


def effective_design_effect(blocks: Sequence[Block], pooled: Pooled, percentile: float,
                            threshold_us: float, alpha: float) -> float:
    """The design effect a bound uses (see the module doc): the larger of
    `MIN_DESIGN_EFFECT` and the widened estimate at the threshold, and, where the threshold
    lies in the tail the percentile's bound looks at (at least `NEAR_TAIL` of its share of
    requests above it), the widened estimate at the pooled value with `WIDER_TAIL` times
    that share above it."""
    tail = 1 - percentile / 100
    estimates = [MIN_DESIGN_EFFECT, widened_design_effect(blocks, threshold_us, alpha)]
    if pooled.above(threshold_us) >= NEAR_TAIL * tail * pooled.requests:
        wider = pooled.at_percentile(100 * (1 - WIDER_TAIL * tail))
        estimates.append(widened_design_effect(blocks, wider, alpha))
    return max(estimates)


def _bound_ranks(n_eff: float, q: float, alpha: float,
                 total: int) -> tuple[int | None, int | None]:
    """The pooled ranks, among `total` requests, of the order-statistic bounds of n_eff
    independent samples (a rank r among n_eff is the fraction r / n_eff of all requests);
    None for a bound the samples are too few to give."""
    size = max(1, math.floor(n_eff))
    lower, upper = quantile_ranks(size, q, 1 - alpha)
    scale = total / size
    low = max(1, math.floor(lower * scale)) if lower >= 1 else None
    high = min(total, math.ceil(upper * scale)) if upper <= size else None
    return low, high


def _bounds(pooled: Pooled, q: float, n_eff: float,
            alpha: float) -> tuple[float | None, float | None]:
    """The bounds (ms) of n_eff independent samples, read at their pooled ranks."""
    low_rank, high_rank = _bound_ranks(n_eff, q, alpha, pooled.requests)
    low = None if low_rank is None else pooled.at_rank(low_rank)[0] / 1e3
    high = None if high_rank is None else pooled.at_rank(high_rank)[1] / 1e3
    return low, high


@dataclass(frozen=True)
class _Sides:
    """The pooled ranks that decide against a threshold: an upper bound at rank `passing`
    or below is at most the threshold, a lower bound at rank `failing` or above exceeds
    it."""

    passing: int
    failing: int


def _sides(pooled: Pooled, threshold_us: float) -> _Sides:
    failing = pooled.requests - pooled.above(threshold_us) + 1
    passing = failing - 1
    if passing >= 1:
        low, high = pooled.at_rank(passing)
        if high > threshold_us:
            # A histogram bucket that straddles the threshold: its requests bound the
            # percentile from above by the bucket's top, so only those below it pass.
            passing = pooled.requests - pooled.above(math.nextafter(low, -math.inf))
    return _Sides(passing, failing)


def _more_requests(sides: _Sides, q: float, design: float, total: int,
                   alpha: float) -> int | None:
    """Roughly how many more requests, were they like those measured (the same
    distribution and design effect), would put a bound on one side: the fewest, to a few
    percent, at which the verdict's own bounds decide, so never 0 for an undecided
    verdict. None: not even `PRACTICAL_GROWTH` times the requests would."""
    def decides(requests: int) -> bool:
        low, high = _bound_ranks(requests / design, q, alpha, total)
        return ((high is not None and high <= sides.passing)
                or (low is not None and low >= sides.failing))

    undecided, enough = total, 2 * total
    while not decides(enough):
        if enough >= PRACTICAL_GROWTH * total:
            return None
        undecided, enough = enough, min(2 * enough, PRACTICAL_GROWTH * total)
    while enough - undecided > max(1, enough // 50):
        middle = (undecided + enough) // 2
        if decides(middle):
            enough = middle
        else:
            undecided = middle
    return enough - total


def judge_percentile(evidence: Evidence, percentile: float, threshold_ms: float,
                     alpha: float) -> PercentileVerdict:
    """Decide `p<percentile> <= threshold_ms`; each bound is one-sided at level alpha."""
    pooled, total = evidence.pooled, evidence.pooled.requests
    if total == 0:
        return PercentileVerdict(percentile, "failed", 0.0, None, None, 0, (),
                                 "no request was measured, so nothing shows the SLO is met")
    q, threshold_us = percentile / 100, threshold_ms * 1e3
    blocks = evidence.blocks
    design = effective_design_effect(blocks, pooled, percentile, threshold_us, alpha)
    n_eff = total / design
    low, high = _bounds(pooled, q, n_eff, alpha)
    observed = pooled.at_percentile(percentile) / 1e3
    more = None
    if high is not None and high <= threshold_ms:
        outcome: Outcome = "passed"
        reason = f"upper bound {high:.2f}ms <= {threshold_ms:g}ms"
    elif low is not None and low > threshold_ms:
        outcome = "failed"
        reason = f"lower bound {low:.2f}ms > {threshold_ms:g}ms"
    else:
        outcome = "inconclusive"
        more = _more_requests(_sides(pooled, threshold_us), q, design, total, alpha)
        reason = ("too few requests for an upper bound" if high is None
                  else f"the interval straddles {threshold_ms:g}ms")
    interval = (f"[{'-' if low is None else f'{low:.2f}'}, "
                f"{'-' if high is None else f'{high:.2f}'}]ms at {1 - alpha:.4g}")
    reason += (f"; interval {interval} from {total} requests in {len(blocks)} blocks "
               f"(design effect {design:.1f}, effective {n_eff:.0f})")
    return PercentileVerdict(percentile, outcome, observed, low, high, total,
                             evidence.window_ms, reason, design, n_eff, more,
                             outlier_window(evidence, percentile, alpha))


def outlier_window(evidence: Evidence, percentile: float, level: float) -> Outlier | None:
    """The window farthest from the others in its share of requests above the pooled
    percentile, when it is too far at `level` (two-sided, Bonferroni over the windows)."""
    windows = [w for w in evidence.windows if sum(b.requests for b in w)]
    if len(windows) < 3 or len(windows) != len(evidence.windows):
        return None
    value_us = evidence.pooled.at_percentile(percentile)
    critical = normal_quantile(1 - level / (2 * len(windows)))
    worst: Outlier | None = None
    for index, window in enumerate(windows):
        rest = [b for other, w in enumerate(windows) if other != index for b in w]
        n_in, x_in = sum(b.requests for b in window), sum(b.above(value_us) for b in window)
        n_out, x_out = sum(b.requests for b in rest), sum(b.above(value_us) for b in rest)
        share = (x_in + x_out) / (n_in + n_out)
        if share in (0.0, 1.0):
            return None
        design = max(1.0, design_effect(rest, value_us))
        spread = math.sqrt(design * share * (1 - share) * (1 / n_in + 1 / n_out))
        z = (x_in / n_in - x_out / n_out) / spread
        if abs(z) > critical and (worst is None or abs(z) > abs(worst.z)):
            worst = Outlier(index, z, critical)
    return worst
