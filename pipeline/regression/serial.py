"""Rounds that are not quite independent: the level a per-round interval needs then.

The per-round interval (Hodges-Lehmann, signed_rank.py) and the group-sequential levels
(pipeline/statistics/group_sequential.py) take rounds as independent. On a busy machine a
server's state can outlast a round: the rounds' log ratios on the example had a lag-1
autocorrelation of about 0.08 at 250 ms windows (30 runs, 2 of them over 0.3), and
0.34-0.52 at 62 ms. Under a lag-1 correlation rho the variance of a mean over n rounds is
(1 + rho) / (1 - rho) times what independence gives, and a candidate exactly on the margin
passed 6.3% of simulated runs at rho 0.1 and 13% at 0.3 for a stated 5%. So each look
estimates rho from the rounds so far and widens its interval by that factor's root (the
AR(1) variance inflation): the level becomes P(Z > z sqrt((1 + rho) / (1 - rho))). A
negative estimate (the A B, B A order alternating a small order effect) is taken as 0,
never as a reason to narrow; rho is capped at MAX_RHO.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from itertools import pairwise

from pipeline.statistics.distributions import normal_quantile, normal_survival

MAX_RHO = 0.6
_MIN_ROUNDS = 8


def lag1_correlation(values: Sequence[float]) -> float:
    """The lag-1 autocorrelation of `values` in their order; 0 for fewer than
    _MIN_ROUNDS values or no spread."""
    if len(values) < _MIN_ROUNDS:
        return 0.0
    mean = statistics.fmean(values)
    deviations = [value - mean for value in values]
    total = sum(d * d for d in deviations)
    if total == 0:
        return 0.0
    return sum(a * b for a, b in pairwise(deviations)) / total


def serial_level(error: float, values: Sequence[float]) -> float:
    """The one-sided level at which an interval that assumes independent `values` keeps
    `error` under their estimated lag-1 correlation."""
    rho = min(max(lag1_correlation(values), 0.0), MAX_RHO)
    if rho == 0 or error <= 0 or error >= 0.5:
        return error
    return normal_survival(-normal_quantile(error) * math.sqrt((1 + rho) / (1 - rho)))
