"""The paired verdict: is the candidate worse than the live release by more than a margin?

Both servers are measured in rounds; each round gives each server one window at the
same load, back to back (A B, then B A: pipeline/compare/plan.py), so a round's two
windows share the machine's state. Per round and watched metric the candidate-to-live
ratio is taken, and the verdict is drawn on log ratios over rounds:

- Tail percentiles (p95, p99) are judged on every request of the rounds pooled: the ratio
  of the two servers' pooled percentiles, with an interval from a paired bootstrap over
  blocks of consecutive rounds (pooled_tail.py). A round's window is too short for its
  own p99 to be more than its third or fourth slowest request; at 64 rounds the
  per-round ratios of the example's p99 and p95 still left intervals of +-12% around 1
  for the same release against itself.
  A round whose latencies were not kept (figures only) falls back to the method below.
- Method for p50 and throughput (per-window figures that are steady within a window):
  the Hodges-Lehmann interval of the median log ratio (Wilcoxon signed rank,
  pipeline/regression/signed_rank.py). Why this one: rounds, not requests, are the unit
  (requests within a window share batches and machine state and are not independent;
  rounds are close to it); it is exact for any n with no distribution assumed beyond
  symmetry of the paired differences, which holds under "no difference" because which
  server goes first alternates; one odd round (a neighbour's burst) moves it by one
  rank instead of dragging a mean; and with the same rounds it is much tighter than a
  sign test's, which needs ~2x the rounds for the same bound. A bootstrap would be too
  narrow at 8-16 rounds, a permutation test of means too sensitive to one odd round.
  Rounds whose log ratios are serially correlated (a state outlasting a round) get a
  stricter level, by the AR(1) variance inflation of the lag-1 correlation read from
  them (serial.py).
- Non-inferiority: for a lower-is-better metric (latencies) no_regression when the
  upper bound of the ratio is below 1 + margin, regression when its lower bound is
  above it; for throughput the same against 1 - margin, mirrored. Otherwise
  inconclusive. A candidate 3% slower clears a 10% margin once the interval is
  narrower than 7%; a candidate 25% slower is refused once it is narrower than 15%.
- Tail percentiles get an absolute allowance on top of the margin (`tail_allowance`,
  default 2% of slo.p99): the candidate's may reach live x (1 + margin) + allowance, so
  the ratio's limit is 1 + margin + allowance / live. On a shared machine the top few
  percent of requests wait on scheduling delays of a few ms that no release causes: real
  A/A runs of the example with a neighbour on one of two cores (p99 about 3.2 ms) gave
  pooled p99 ratios with intervals of +-16% after 64 rounds, never inside a 10% margin,
  while 0.2 ms more per execution moved p50 and throughput beyond it within 32 rounds.
  A tail change under 2% of the SLO is immaterial to it; one beyond it is still refused.
  p50 and throughput keep the plain margin.
- Error rate is compared by counts summed over rounds (error_counts.py), never as a
  ratio of rates; it is refused only when surely worse beyond both margins.
- Sequential: the verdict is looked at after `first_look` rounds, then every
  `look_every`, up to `max_rounds`, and stops at the first look where every metric is
  decided or one is a regression. A spending function of the rounds' share of the cap
  says how much error may be spent by each look, and each look's bounds are built at the
  level whose first crossing spends exactly that, given the looks before: a
  group-sequential boundary, computed as clinical trials compute theirs
  (pipeline/statistics/group_sequential.py). A union bound over the increments, used
  before, ignored that the looks share most of their rounds and left the last looks'
  intervals about 20% wider than the stated error needs.
- Which spending function, and the cap (160): chosen on simulated streams whose windows
  vary as the example's do on a busy 2-core machine (benchmarks/regression_calibration.py
  --window-sd 0.15; docs/reports.md). Linear spending (Hwang-Shih-DeCani, parameter 0)
  up to 160 rounds refused a candidate 3% slower in 5.5% of runs and decided A/A at a
  median of 48 rounds; the O'Brien-Fleming-type function up to 96 refused it in 19% and
  needed 64 (up to 160: 2%, but 80). At 16, 32, ..., 160 rounds and 95% the levels are
  0.005, 0.0064, 0.008, ... 0.021 each way: every look may stop a clear case.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pipeline.regression.error_counts import compare_errors
from pipeline.regression.outcome import Outcome
from pipeline.regression.pooled_tail import pooled_ratio
from pipeline.regression.serial import serial_level
from pipeline.regression.signed_rank import median_interval
from pipeline.statistics.group_sequential import look_levels
from pipeline.statistics.sequential import hwang_shih_decani_spent, obrien_fleming_spent

Direction = Literal["lower", "higher"]
RATIO_METRICS: dict[str, Direction] = {"p99_ms": "lower", "p95_ms": "lower",
                                       "p50_ms": "lower", "throughput_rps": "higher"}
ERROR_RATE = "error_rate"
WATCHABLE: tuple[str, ...] = (*RATIO_METRICS, ERROR_RATE)
POOLED_PERCENTILES: dict[str, float] = {"p95_ms": 95.0, "p99_ms": 99.0}
# The tail percentiles, judged against the margin plus `tail_allowance_ms`.
TAIL_METRICS = frozenset(POOLED_PERCENTILES)
# A zero throughput or latency (a window with nothing completed) is clamped, so its log
# ratio is huge and decides rather than breaking the arithmetic.
_FLOOR = 1e-6


@dataclass(frozen=True)
class WindowFigures:
    """What one server did in one window of a round; `latencies_us`, every request's
    latency (failed ones censored at the timeout), for the pooled tail percentiles (not
    written to the record)."""

    p50_ms: float
    p95_ms: float
    p99_ms: float
    throughput_rps: float
    errors: int
    requests: int
    latencies_us: tuple[int, ...] = field(default=(), repr=False, compare=False)

    def figures(self) -> dict[str, float | int]:
        """The window's figures as the record keeps them."""
        return {"p50_ms": self.p50_ms, "p95_ms": self.p95_ms, "p99_ms": self.p99_ms,
                "throughput_rps": self.throughput_rps, "errors": self.errors,
                "requests": self.requests}

    def value(self, metric: str) -> float:
        return float(getattr(self, metric))


@dataclass(frozen=True)
class PairedRound:
    candidate: WindowFigures
    live: WindowFigures


@dataclass(frozen=True)
class Schedule:
    """When the verdict is looked at: after `first_look` rounds, then every `look_every`."""

    first_look: int
    look_every: int
    max_rounds: int
    # The spending function: Hwang-Shih-DeCani's with this parameter, 0 (linear: each
    # round spends the same share of the error) unless told; None: O'Brien-Fleming-type.
    # benchmarks/regression_calibration.py --spending compares them (docs/reports.md).
    spending_gamma: float | None = 0.0

    def looks(self) -> list[int]:
        points = list(range(self.first_look, self.max_rounds + 1, max(self.look_every, 1)))
        return points if points and points[-1] == self.max_rounds else [*points,
                                                                        self.max_rounds]

    def error_at(self, look: int, confidence: float) -> float:
        """The one-sided level of the 0-based `look`'s bounds. An O'Brien-Fleming-type
        spending function of the rounds' share of the cap says how much of 1 - confidence
        may be spent by each look (early looks little, the last the most); the level is
        the one at which that look is the first to cross with exactly its increment,
        given the looks before (pipeline/statistics/group_sequential.py), so that the
        whole sequence keeps 1 - confidence each way."""
        points, alpha = self.looks(), 1 - confidence
        cap = points[-1]
        fractions = [point / cap for point in points]
        spent = [obrien_fleming_spent(fraction, alpha) if self.spending_gamma is None
                 else hwang_shih_decani_spent(fraction, alpha, self.spending_gamma)
                 for fraction in fractions]
        return look_levels(fractions, spent)[look]


@dataclass(frozen=True)
class MetricVerdict:
    metric: str
    outcome: Outcome
    live: float                 # medians over rounds (tail percentiles, error rate: pooled)
    candidate: float
    ratio: float | None         # candidate / live (Hodges-Lehmann); None: error rate at 0/0
    ratio_low: float | None     # None: unbounded at this many rounds
    ratio_high: float | None
    limit: float                # the ratio the margin allows
    rounds: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class PairedVerdict:
    outcome: Outcome
    metrics: tuple[MetricVerdict, ...]
    rounds: int
    looks: int
    margin: float
    confidence: float

    def to_json(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "rounds": self.rounds, "looks": self.looks,
                "margin": self.margin, "confidence": self.confidence,
                "metrics": [verdict.to_json() for verdict in self.metrics]}

    @property
    def is_clear(self) -> bool:
        """Decided: one metric is a regression, or every metric is clear of one."""
        outcomes = {verdict.outcome for verdict in self.metrics}
        return "regression" in outcomes or outcomes == {"no_regression"}


def _exp(value: float | None) -> float | None:
    return None if value is None else math.exp(value)


def judge_ratio(metric: str, rounds: Sequence[PairedRound], margin: float,
                error: float, allowance_ms: float = 0.0) -> MetricVerdict:
    """The non-inferiority verdict of one ratio metric over `rounds`; a latency may also be
    `allowance_ms` above live x (1 + margin)."""
    direction = RATIO_METRICS[metric]
    candidate = [r.candidate.value(metric) for r in rounds]
    live = [r.live.value(metric) for r in rounds]
    pooled = metric in POOLED_PERCENTILES and all(
        r.candidate.latencies_us and r.live.latencies_us for r in rounds)
    if pooled:
        tail = pooled_ratio([r.candidate.latencies_us for r in rounds],
                            [r.live.latencies_us for r in rounds],
                            POOLED_PERCENTILES[metric], error)
        estimate, low, high = math.exp(tail.estimate), _exp(tail.low), _exp(tail.high)
        live_value, candidate_value = tail.live / 1e3, tail.candidate / 1e3
    else:
        logs = [math.log(max(new, _FLOOR) / max(old, _FLOOR))
                for new, old in zip(candidate, live, strict=True)]
        interval = median_interval(logs, serial_level(error, logs))
        estimate, low, high = (math.exp(interval.estimate), _exp(interval.low),
                               _exp(interval.high))
        live_value, candidate_value = statistics.median(live), statistics.median(candidate)
    limit = 1 + margin if direction == "lower" else 1 - margin
    allowed = ""
    if direction == "lower" and allowance_ms > 0 and live_value > 0:
        limit += allowance_ms / live_value
        allowed = (f" ({margin:.0%} + {allowance_ms:.3g}ms over live's "
                   f"{live_value:.3g}ms)")
    worse = "above" if direction == "lower" else "below"
    if direction == "lower":
        cleared = high is not None and high < limit
        refused = low is not None and low > limit
    else:
        cleared = low is not None and low > limit
        refused = high is not None and high < limit
    if cleared:
        outcome: Outcome = "no_regression"
        reason = f"the ratio's interval lies clear of {limit:.4g}{allowed}"
    elif refused:
        outcome, reason = "regression", f"the ratio's interval lies {worse} {limit:.4g}{allowed}"
    elif low is None:
        outcome, reason = "inconclusive", f"{len(rounds)} rounds cannot bound the ratio"
    else:
        outcome, reason = "inconclusive", f"the ratio's interval straddles {limit:.4g}{allowed}"
    if pooled:
        reason += " (pooled requests, paired bootstrap over blocks of rounds)"
    return MetricVerdict(metric, outcome, live_value, candidate_value, estimate, low, high,
                         limit, len(rounds), reason)


def judge_error_rate(rounds: Sequence[PairedRound], margin: float, allowance: float,
                     error: float) -> MetricVerdict:
    candidate = (sum(r.candidate.errors for r in rounds), sum(r.candidate.requests
                                                             for r in rounds))
    live = (sum(r.live.errors for r in rounds), sum(r.live.requests for r in rounds))
    compared = compare_errors(candidate, live, margin, allowance, error)
    ratio = None
    if live[0] and candidate[1] and live[1]:
        ratio = compared.candidate_rate / compared.live_rate
    high = None if math.isinf(compared.ratio_high) else compared.ratio_high
    return MetricVerdict(ERROR_RATE, compared.outcome, compared.live_rate,
                         compared.candidate_rate, ratio, compared.ratio_low, high,
                         1 + margin, len(rounds), compared.reason)


def judge(rounds: Sequence[PairedRound], metrics: Sequence[str], margin: float,
          error: float, error_rate_allowance: float, confidence: float,
          looks: int, tail_allowance_ms: float = 0.0) -> PairedVerdict:
    """Every watched metric at one look, each bound wrong with probability <= `error`."""
    verdicts = tuple(
        judge_error_rate(rounds, margin, error_rate_allowance, error) if metric == ERROR_RATE
        else judge_ratio(metric, rounds, margin, error,
                         tail_allowance_ms if metric in TAIL_METRICS else 0.0)
        for metric in metrics)
    outcomes = {verdict.outcome for verdict in verdicts}
    outcome: Outcome = ("regression" if "regression" in outcomes else
                        "no_regression" if outcomes == {"no_regression"} else "inconclusive")
    return PairedVerdict(outcome, verdicts, len(rounds), looks, margin, confidence)


@dataclass(frozen=True)
class PairedSettings:
    metrics: tuple[str, ...]
    margin: float
    error_rate_allowance: float
    confidence: float
    schedule: Schedule
    tail_allowance_ms: float = 0.0


def run_sequential(next_round: Callable[[int], PairedRound],
                   settings: PairedSettings) -> tuple[PairedVerdict, list[PairedRound]]:
    """Measure rounds (`next_round(index)`) until a look is clear or the cap; the verdict
    of the last look and every round measured."""
    schedule = settings.schedule
    looks = schedule.looks()
    rounds: list[PairedRound] = []
    verdict: PairedVerdict | None = None
    taken = 0
    while len(rounds) < schedule.max_rounds:
        rounds.append(next_round(len(rounds)))
        if len(rounds) not in looks:
            continue
        error = schedule.error_at(taken, settings.confidence)
        taken += 1
        verdict = judge(rounds, settings.metrics, settings.margin, error,
                        settings.error_rate_allowance, settings.confidence, taken,
                        settings.tail_allowance_ms)
        if verdict.is_clear:
            break
    assert verdict is not None  # the last round is always a look
    return verdict, rounds
