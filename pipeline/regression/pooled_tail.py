"""The ratio of two pooled percentiles, with its interval from a paired bootstrap over blocks
of rounds.

Why pooled: a round's window is short (a quarter of a second at the latency stage's
concurrency: a few hundred requests), so its own p99 is the third or fourth slowest
request of the window, and the ratio of two such figures swings by tens of percent from
round to round. The question is about the percentile of every request each server
answered, so the estimate is the ratio of the two pooled percentiles over all rounds.

Why a paired bootstrap over blocks of rounds: requests are not independent (they share
batches and the machine's state), and a round's two windows share the machine's state,
so rounds are resampled with both of a round's windows together. Nor are rounds always
independent: a busy machine slows one server, not the other, for a few seconds at a time
(the scheduler placing its threads next to a neighbour's), and those few rounds then hold
much of that server's top 1%. So consecutive rounds are resampled in blocks (a moving-
block bootstrap, circular, blocks of about the cube root of the rounds: 3 at 16 and 32
rounds, 4 at 48 and 64), which keeps such an episode in one piece. On simulated streams
with such episodes (benchmarks/regression_calibration.py --episodes), a candidate 3%
slower was called a regression against a 10% margin 8 times in 60 when single rounds
were resampled, 4 in 60 with blocks; without episodes blocks cost little (A/A refused 6
of 60 against 5). The log ratio is recomputed for each resample. The interval is the
estimate plus or minus t_{b-1} times the resamples' standard deviation (b blocks), not
the resamples' own percentiles: at 16 rounds those are too narrow, and the t keeps the
stated error at the first look. The resampling is seeded, so the same rounds give the
same verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pipeline.statistics.distributions import t_quantile

RESAMPLES = 1000
_CHUNK = 50
_SEED = 20241
# The top slice searched first for a tail quantile: this many times the tail's share of
# the requests, plus a few, so that a resample's quantile is almost always inside it.
_TOP_SLICE = 4
_TOP_EXTRA = 64


@dataclass(frozen=True)
class RatioInterval:
    """A log ratio's estimate and bounds (None: too few rounds, or a side has no request)."""

    estimate: float
    low: float | None
    high: float | None
    candidate: float          # the pooled percentiles themselves (µs)
    live: float


class PooledRequests:
    """One server's requests over the rounds, sorted, each with the round it came from."""

    def __init__(self, windows: Sequence[Sequence[int]]) -> None:
        values = np.concatenate([np.asarray(w, dtype=np.float64) for w in windows])
        rounds = np.concatenate([np.full(len(w), index, dtype=np.intp)
                                 for index, w in enumerate(windows)])
        order = np.argsort(values, kind="stable")
        self.values: npt.NDArray[np.float64] = values[order]
        self.rounds: npt.NDArray[np.intp] = rounds[order]
        self.per_round: npt.NDArray[np.int64] = np.asarray([len(w) for w in windows],
                                                           dtype=np.int64)

    def quantiles(self, weights: npt.NDArray[np.int32], q: float) -> npt.NDArray[np.float64]:
        """The q-quantile of the requests, each round counted `weights[b, round]` times,
        for every resample b: the smallest value with at least q of the weight at or
        below it (what an HDR histogram's value at a percentile is).

        Only the top of the sorted requests can hold a tail quantile, so it is found there
        first (a resample's total weight comes from per-round counts); a resample whose
        quantile lies below that slice is recomputed over every request. Same answer as
        the full computation, many times faster for p95 and p99."""
        totals = weights @ self.per_round
        target = q * totals
        size = len(self.values)
        top = min(size, math.ceil((1 - q) * size * _TOP_SLICE) + _TOP_EXTRA)
        first = size - top
        slice_weights = weights[:, self.rounds[first:]]
        # Weight at or above each request of the slice, then at or below it.
        at_or_above = np.cumsum(slice_weights[:, ::-1], axis=1, dtype=np.int64)[:, ::-1]
        at_or_below = totals[:, None] - at_or_above + slice_weights
        index = first + np.sum(at_or_below < target[:, None], axis=1)
        if top < size:
            below_slice = totals - at_or_above[:, 0] >= target
            if below_slice.any():
                index[below_slice] = self._full_index(weights[below_slice], q)
        picked: npt.NDArray[np.float64] = self.values[np.minimum(index, size - 1)]
        return picked

    def _full_index(self, weights: npt.NDArray[np.int32], q: float) -> npt.NDArray[np.intp]:
        cumulative = np.cumsum(weights[:, self.rounds], axis=1, dtype=np.int64)
        target = q * cumulative[:, -1]
        found: npt.NDArray[np.intp] = np.sum(cumulative < target[:, None], axis=1)
        return found


def pooled_ratio(candidate: Sequence[Sequence[int]], live: Sequence[Sequence[int]],
                 percentile: float, error: float) -> RatioInterval:
    """The candidate-to-live ratio of the pooled `percentile`, each bound wrong with
    probability at most `error` (`candidate[i]`, `live[i]`: round i's latencies, µs)."""
    rounds = len(candidate)
    if rounds != len(live) or rounds == 0:
        raise ValueError("the two servers need the same, non-zero number of rounds")
    ours, theirs = PooledRequests(candidate), PooledRequests(live)
    if not len(ours.values) or not len(theirs.values):
        return RatioInterval(0.0, None, None, 0.0, 0.0)
    q = percentile / 100
    everyone = np.ones((1, rounds), dtype=np.int32)
    new, old = float(ours.quantiles(everyone, q)[0]), float(theirs.quantiles(everyone, q)[0])
    estimate = math.log(max(new, 1.0) / max(old, 1.0))
    length = block_length(rounds)
    if rounds < 3 * length:
        return RatioInterval(estimate, None, None, new, old)
    blocks = -(-rounds // length)
    rng = np.random.default_rng([_SEED, rounds])
    logs: list[npt.NDArray[np.float64]] = []
    for start in range(0, RESAMPLES, _CHUNK):
        size = min(_CHUNK, RESAMPLES - start)
        firsts = rng.integers(0, rounds, size=(size, blocks))
        picks = ((firsts[:, :, None] + np.arange(length)) % rounds).reshape(size, -1)
        weights = np.zeros((size, rounds), dtype=np.int32)
        np.add.at(weights, (np.arange(size)[:, None], picks[:, :rounds]), 1)
        logs.append(np.log(np.maximum(ours.quantiles(weights, q), 1.0))
                    - np.log(np.maximum(theirs.quantiles(weights, q), 1.0)))
    spread = float(np.std(np.concatenate(logs), ddof=1)) * math.sqrt(blocks / (blocks - 1))
    half = t_quantile(1 - error, blocks - 1) * spread
    return RatioInterval(estimate, estimate - half, estimate + half, new, old)


def block_length(rounds: int) -> int:
    """Consecutive rounds resampled together: the cube root of the rounds (the usual
    order for a moving-block bootstrap), so that an episode of a few rounds in which the
    machine slowed one server and not the other stays in one piece."""
    return max(1, round(math.pow(rounds, 1 / 3)))
