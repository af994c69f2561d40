"""Group-sequential bounds: how wide each look's interval must be for a stated error overall.

A verdict looked at after n_1 < n_2 < ... rounds may cross its bound at any look; what
the spending function spends at look k (its increment) is the chance that look k is the
*first* to cross when the truth sits on the bound. A union bound gives each look's bound
exactly its increment as its own error, which ignores that successive looks share most of
their rounds: a path that crosses at the last look has usually come close before. The
exact level is found as clinical trials find theirs (Armitage, McPherson and Rowe 1969;
Lan and DeMets 1983; what gsDesign and rpact compute): the estimate at look k is taken as
a Brownian motion at information fraction t_k, the density of paths that have not crossed
yet is carried from look to look by numerical integration, and each look's boundary is
the one whose first-crossing probability equals its increment. The level each look's
interval is built with is the standard normal tail beyond that boundary.

Assumption, stated: the looks' estimates behave like a Brownian motion in the rounds
(independent rounds, an estimate that is close to normal by the later looks). Where
rounds carry a state over, the per-round interval widens by the lag-1 correlation it
reads (pipeline/regression/serial.py; benchmarks/regression.py prints it per run); the
early looks, where normality is weakest, spend almost nothing either way. Each bound is
one-sided: stopping on the other bound or on another metric only takes chances to cross
away.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from pipeline.statistics.distributions import bisect, normal_quantile, normal_survival

Floats = NDArray[np.float64]
_GRID = 801                 # points carrying the density of the paths still going
_COARSE_GRID = 301          # past _MANY_LOOKS looks (a look every few rounds up to 1000)
_MANY_LOOKS = 100
_SPAN = 8.0                 # the density is carried from -8 standard deviations
_NO_BOUND = 12.0            # a look that spends nothing: a boundary no path reaches
# log P(Z > x) tabulated, for vectorised tails (numpy has no erfc): interpolated, its
# relative error is under 1e-6 between -12 and 12.
_TABLE_X = np.linspace(-_NO_BOUND - 1, _NO_BOUND + 1, 26_001)
_TABLE_LOG_Q = np.log([0.5 * math.erfc(x / math.sqrt(2)) for x in _TABLE_X])


def _survival(x: Floats) -> Floats:
    return np.exp(np.interp(x, _TABLE_X, _TABLE_LOG_Q))


def look_levels(fractions: Sequence[float], spent: Sequence[float]) -> list[float]:
    """The one-sided level of each look's bound, given each look's information fraction
    (increasing, the last 1) and the error the spending function has spent by it
    (cumulative, non-decreasing)."""
    return list(_levels(tuple(fractions), tuple(spent)))


@lru_cache(maxsize=64)
def _levels(fractions: tuple[float, ...], spent: tuple[float, ...]) -> tuple[float, ...]:
    boundaries: list[float] = []
    points = _GRID if len(fractions) <= _MANY_LOOKS else _COARSE_GRID
    grid = np.zeros(0)
    density = np.zeros(0)
    weights = np.zeros(0)
    previous_t, previous_spent = 0.0, 0.0
    for t, cumulative in zip(fractions, spent, strict=True):
        increment = max(cumulative - previous_spent, 0.0)
        if not boundaries:
            boundary = min(-normal_quantile(increment), _NO_BOUND) if increment > 0 else _NO_BOUND
        else:
            boundary = _first_crossing_boundary(grid, density * weights, t - previous_t,
                                                math.sqrt(t), increment)
        boundaries.append(boundary)
        grid, density, weights = _carry(grid, density * weights, previous_t, t,
                                        boundary * math.sqrt(t), points,
                                        first=len(boundaries) == 1)
        previous_t, previous_spent = t, cumulative
    return tuple(normal_survival(boundary) for boundary in boundaries)


def _first_crossing_boundary(grid: Floats, mass: Floats, step: float, root_t: float,
                             increment: float) -> float:
    """The boundary z at which paths still going (`mass` at positions `grid`) cross after
    `step` more information with probability `increment`."""
    if increment <= 0:
        return _NO_BOUND
    root_step = math.sqrt(step)

    def crossing(z: float) -> float:
        return float(np.dot(mass, _survival((z * root_t - grid) / root_step)))

    low, high = -_NO_BOUND, _NO_BOUND
    if crossing(low) <= increment:
        return low
    return bisect(lambda z: crossing(z) > increment, low, high)[1]


def _carry(grid: Floats, mass: Floats, previous_t: float, t: float, edge: float,
           points: int, first: bool) -> tuple[Floats, Floats, Floats]:
    """The density at information `t` of the paths still under `edge` (on the sum's scale),
    on a new grid, with its trapezoid weights."""
    root_t = math.sqrt(t)
    upper = min(edge, _SPAN * root_t)
    lower = -_SPAN * root_t
    if upper <= lower:
        upper = lower + 1e-9
    new_grid = np.linspace(lower, upper, points)
    if first:
        density = np.exp(-0.5 * (new_grid / root_t) ** 2) / (root_t * math.sqrt(2 * math.pi))
    else:
        root_step = math.sqrt(t - previous_t)
        kernel = np.exp(-0.5 * ((new_grid[:, None] - grid[None, :]) / root_step) ** 2) / (
            root_step * math.sqrt(2 * math.pi))
        density = kernel @ mass
    weights = np.full(points, new_grid[1] - new_grid[0])
    weights[0] = weights[-1] = weights[0] / 2
    return new_grid, density, weights
