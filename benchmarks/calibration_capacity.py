"""The capacity search's error rates, measured on a simulated server of known capacity.

A discrete-event simulation of a server (instances, dynamic batching, an execution time
per batch with jitter, and slow periods as a busy neighbour gives them) answers the open
loop's constant arrivals; a fake clock stands for the time each step takes. The project's
own capacity code judges it: `find_capacity`, `judge` (the holds' blocks) and the capacity
gate. The true capacity of each simulated server is the highest rate whose long-run p99
meets the SLO (found once per case by a long simulation). One case stalls at the start of
every window (a server still clearing the last overload): it is judged on holds only.

    python benchmarks/calibration_capacity.py [--trials N] [--seed S]

prints one JSON line: the fractions of trials per case, and over the cases
`capacity_pass_above_10pct` (a hold at 1.1 x the true capacity passes; goal <= 5%),
`capacity_pass_at_0_8` (a hold at 0.8 x passes; goal >= 95%), `threshold_decided_pass`
(slo.min_throughput at 0.5 x the true capacity: the gate passes), `exact_within_70_100pct`
(the slow model: one instance, 5 ms per execution, SLO p99 50 ms, physical limit 200/s,
gets an exact capacity within 70-100% of 200/s), `capacity_interval_covers_min` (the
stated capacity interval holds the true capacity; goal >= 90%) and, beside it,
`capacity_bracket_covers_min` (the search's bracket alone, held to failed, would have).
`capacity_pass_above_10pct(trials, seed)` gives the first alone, for benchmarks/calibration.py.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.gates.capacity import capacity_gate
from pipeline.spec.stage_settings import CapacitySpec
from pipeline.statistics import capacity
from pipeline.statistics.capacity import Drained
from pipeline.statistics.capacity_figure import CapacityFigure
from pipeline.statistics.capacity_hold import HOLD_BLOCKS, Block

Floats = npt.NDArray[np.float64]
SLO_MS = 50.0
ERROR_RATE = 0.001
TIMEOUT_S = 4 * SLO_MS / 1e3      # capacity_steps.STEP_TIMEOUT_SLO_MULTIPLE x the SLO
HORIZON_S = 400.0


@dataclass(frozen=True)
class Server:
    instances: int
    max_batch: int
    max_delay_s: float
    base_s: float            # one execution's fixed time
    per_item_s: float        # and per request in its batch
    jitter: float            # lognormal sigma of each execution's time
    slow_share: float        # the share of time a neighbour slows the machine
    slow_factor: float
    slow_mean_s: float       # the mean length of a slow period
    physical_rps: float      # the most the server can do at all (for the report)
    # Each window starts with the server answering nothing for this long: what the last
    # step's overload still clearing, or a pause as the load starts, does to a hold.
    start_stall_s: float = 0.0


CASES = {
    # One instance, 5 ms per execution, no batching: at most 200/s.
    "slow": Server(1, 1, 0.0, 0.005, 0.0, 0.1, 0.1, 1.3, 0.3, 200.0),
    # Two instances with dynamic batching, and a neighbour that halves the speed 15% of
    # the time in periods of 0.2 s: correlated latencies, as on a busy 2-core machine.
    "batched_busy": Server(2, 32, 0.002, 0.001, 0.0003, 0.3, 0.15, 2.0, 0.2, 6000.0),
    "batched_quiet": Server(2, 32, 0.002, 0.001, 0.0003, 0.2, 0.0, 1.0, 0.2, 6000.0),
    # The same, each window starting with a 0.4 s stall: its first requests time out, and
    # the backlog is worked off within the first of a 20 s hold's blocks (its warm-up).
    "batched_stalled_start": Server(2, 32, 0.002, 0.001, 0.0003, 0.2, 0.0, 1.0, 0.2, 6000.0,
                                    start_stall_s=0.4),
}


def slow_periods(server: Server, rng: np.random.Generator) -> Floats:
    """Start and end times of the slow periods over the horizon (alternating renewals)."""
    if server.slow_share <= 0:
        return np.zeros((0, 2))
    fast_mean = server.slow_mean_s * (1 - server.slow_share) / server.slow_share
    edges, now = [], float(rng.exponential(fast_mean))
    while now < HORIZON_S * 2:
        length = float(rng.exponential(server.slow_mean_s))
        edges.append((now, now + length))
        now += length + float(rng.exponential(fast_mean))
    return np.array(edges)


class Simulated:
    """One simulated server over a fake clock; each step starts from an idle queue."""

    def __init__(self, server: Server, rng: np.random.Generator) -> None:
        self.server, self.rng = server, rng
        self.periods = slow_periods(server, rng)
        self.now = 0.0

    def factor(self, at: float) -> float:
        index = int(np.searchsorted(self.periods[:, 0], at, side="right")) - 1 \
            if len(self.periods) else -1
        slowed = index >= 0 and at < self.periods[index, 1]
        return self.server.slow_factor if slowed else 1.0

    def latencies(self, rate: float, duration_s: float) -> tuple[Floats, Floats]:
        """(intended start offsets, latencies in seconds) of one constant-rate window."""
        server, count = self.server, max(1, int(rate * duration_s))
        arrivals = np.arange(count) / rate
        done = np.empty(count)
        free = [server.start_stall_s] * server.instances
        jitter = self.rng.lognormal(-server.jitter ** 2 / 2, server.jitter, count)
        i = 0
        while i < count:
            instance = min(range(server.instances), key=free.__getitem__)
            start = max(free[instance], arrivals[i])
            if server.max_batch > 1:
                full = i + server.max_batch - 1
                filled = arrivals[full] if full < count else math.inf
                start = max(start, min(arrivals[i] + server.max_delay_s, filled))
            end = min(count, i + server.max_batch, int(start * rate) + 1)
            end = max(end, i + 1)
            took = (server.base_s + server.per_item_s * (end - i)) * jitter[i] * \
                self.factor(self.now + start)
            done[i:end] = start + took
            free[instance] = start + took
            i = end
        return arrivals, done - arrivals

    def step(self, rate: float, duration_s: float, hold: bool) -> capacity.StepOutcome:
        arrivals, latency = self.latencies(rate, duration_s)
        self.now += duration_s + min(TIMEOUT_S, max(0.0, float(np.max(latency)) - 0))
        return capacity.judge(measurement(rate, duration_s, arrivals, latency, hold),
                              capacity.Limits(SLO_MS, ERROR_RATE), on_bound=hold)

    def settle(self) -> Drained:
        self.now += 0.25
        return Drained(0.25, True, 1)


def _p(values: Floats, q: float) -> float:
    return float(np.percentile(values, q, method="higher")) * 1e3 if len(values) else 0.0


def measurement(rate: float, duration_s: float, arrivals: Floats, latency: Floats,
                hold: bool) -> capacity.StepMeasurement:
    """What the real step measures, from simulated latencies: timeouts are errors censored
    at the timeout, a hold's blocks by intended start (its error rate and samples those of
    the blocks after its warm-up), the drain after the schedule."""
    censored = np.minimum(latency, TIMEOUT_S)
    count = HOLD_BLOCKS if hold else 2
    cut = np.minimum((arrivals / duration_s * count).astype(int), count - 1)
    judged = latency[cut >= 1] if hold else latency
    errors = float(np.mean(judged > TIMEOUT_S)) if len(judged) else 0.0
    parts = [censored[cut == index] for index in range(count)]
    blocks = tuple(Block(len(part), _p(part, 50), _p(part, 99)) for part in parts) if hold \
        else ()
    half = count // 2
    first, second = np.concatenate(parts[:half]), np.concatenate(parts[half:])
    drain = max(0.0, float(np.max(arrivals + censored)) - duration_s)
    return capacity.StepMeasurement(
        rate, duration_s, _p(censored, 99), _p(first, 50), _p(second, 50), errors,
        len(judged), drain, 0.0, False, blocks=blocks,
        settled_p99_ms=_p(np.concatenate(parts[1:]), 99) if hold else None)


def long_run_p99_ms(server: Server, rate: float, seed: int, seconds: float = 120.0) -> float:
    simulated = Simulated(server, np.random.default_rng(seed))
    _, latency = simulated.latencies(rate, seconds)
    settled = latency[int(len(latency) * 0.05):]
    if np.mean(settled > TIMEOUT_S) > ERROR_RATE:
        return math.inf
    return _p(settled, 99)


def true_capacity(server: Server, seed: int) -> float:
    """The highest rate whose long-run p99 meets the SLO (bisected to 0.5%)."""
    low, high = server.physical_rps * 0.05, server.physical_rps * 1.2
    while high / low > 1.005:
        middle = math.sqrt(low * high)
        if long_run_p99_ms(server, middle, seed) <= SLO_MS:
            low = middle
        else:
            high = middle
    return low


LIMITS = capacity.Limits(SLO_MS, ERROR_RATE)
HOLD_SPAN_S = CapacitySpec().span.seconds


def settings(knee: float, threshold: float | None) -> capacity.SearchSettings:
    """The spec's defaults (1 s steps, 3 s holds, the span), the budget as the stage sizes
    it."""
    fixed = capacity.SearchSettings(0.0, 1.0, 3.0, TIMEOUT_S, hold_span_s=HOLD_SPAN_S,
                                    first_hold=CapacitySpec().first_hold.fraction)
    budget = fixed.needed_budget(knee * fixed.start_fraction, threshold)
    return replace(fixed, budget_s=budget)


def hold_passes(server: Server, rate: float, seed: int) -> bool:
    """One hold as the search holds a rate (in segments until decided, within a budget)."""
    simulated = Simulated(server, np.random.default_rng(seed))
    simulated.now = float(simulated.rng.uniform(0, HORIZON_S / 2))
    return capacity.hold_rate(simulated.step, simulated.settle, rate, settings(rate, None),
                              LIMITS, lambda: simulated.now).passed


def search(server: Server, knee: float, threshold: float | None,
           seed: int) -> capacity.CapacitySearch:
    simulated = Simulated(server, np.random.default_rng(seed))
    simulated.now = float(simulated.rng.uniform(0, HORIZON_S / 4))
    return capacity.find_capacity(simulated.step, simulated.settle, knee,
                                  settings(knee, threshold), lambda: simulated.now,
                                  threshold_rps=threshold, limits=LIMITS)


def case_rates(name: str, server: Server, trials: int, seed: int) -> dict[str, float]:
    true = true_capacity(server, seed)
    seeds = trial_seeds(trials, seed)
    above = np.mean([hold_passes(server, 1.1 * true, s) for s in seeds])
    at = np.mean([hold_passes(server, 1.0 * true, s) for s in seeds])
    below = np.mean([hold_passes(server, 0.8 * true, s) for s in seeds])
    holds = {f"{name}_true_capacity_rps": round(true, 1),
             f"{name}_hold_pass_above_10pct": float(above),
             f"{name}_hold_pass_at_capacity": float(at),
             f"{name}_hold_pass_at_0_8": float(below)}
    if server.start_stall_s > 0:
        return holds      # a hold's case: a 1 s step that stalls 0.4 s fails, as it should
    # The closed-loop knee's throughput is about the physical limit (never idle).
    knee = server.physical_rps * 0.95
    decided, exact, over, covered, bracketed = [], [], [], [], []
    for s in seeds:
        found = search(server, knee, 0.5 * true, s)
        gate = capacity_gate(found, 0.5 * true)
        decided.append(gate is not None and gate.outcome == "passed")
        rate = found.confirmed.rate_rps if found.confirmed else 0.0
        exact.append(found.bound == "exact" and
                     0.7 * server.physical_rps <= rate <= server.physical_rps)
        over.append(rate > 1.1 * true)
        figure = CapacityFigure.of(found)
        covered.append(figure is not None and figure.low_rps <= true <= figure.top)
        bracketed.append(figure is not None and figure.rps <= true <= (
            math.inf if figure.failed_rps is None else figure.failed_rps))
    return {**holds,
            f"{name}_threshold_decided_pass": float(np.mean(decided)),
            f"{name}_exact_within_70_100pct": float(np.mean(exact)),
            f"{name}_capacity_over_10pct": float(np.mean(over)),
            f"{name}_interval_covers": float(np.mean(covered)),
            f"{name}_bracket_covers": float(np.mean(bracketed))}


def trial_seeds(trials: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed + 1)
    return [int(value) for value in rng.integers(0, 2**31, size=trials)]


def capacity_pass_above_10pct(trials: int = 100, seed: int = 1) -> float:
    """The share of trials in which a hold at 1.1 x the true capacity passes, the most over
    the cases (goal: at most 5%). Holds only, no search: about a minute at 100 trials."""
    worst = 0.0
    for server in CASES.values():
        true = true_capacity(server, seed)
        rate = float(np.mean([hold_passes(server, 1.1 * true, s)
                              for s in trial_seeds(trials, seed)]))
        worst = max(worst, rate)
    return worst


def capacity_pass_rates(trials: int = 100, seed: int = 1) -> dict[str, float]:
    """Fractions of trials per case, and the worst over the cases."""
    rates: dict[str, float] = {}
    for name, server in CASES.items():
        rates |= case_rates(name, server, trials, seed)
    names = list(CASES)
    searched = [name for name, server in CASES.items() if server.start_stall_s == 0]
    rates["capacity_pass_above_10pct"] = max(rates[f"{n}_hold_pass_above_10pct"] for n in names)
    rates["capacity_pass_at_0_8"] = min(rates[f"{n}_hold_pass_at_0_8"] for n in names)
    rates["threshold_decided_pass"] = min(rates[f"{n}_threshold_decided_pass"]
                                          for n in searched)
    rates["exact_within_70_100pct"] = rates["slow_exact_within_70_100pct"]
    rates["capacity_search_over_10pct"] = max(rates[f"{n}_capacity_over_10pct"]
                                              for n in searched)
    rates["capacity_interval_covers_min"] = min(rates[f"{n}_interval_covers"]
                                                for n in searched)
    rates["capacity_bracket_covers_min"] = min(rates[f"{n}_bracket_covers"]
                                               for n in searched)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    began = time.perf_counter()
    rates = capacity_pass_rates(args.trials, args.seed)
    rates["seconds"] = round(time.perf_counter() - began, 1)
    print(json.dumps(rates))


if __name__ == "__main__":
    main()
