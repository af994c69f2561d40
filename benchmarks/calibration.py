"""Are the verdicts right as often as they say? Simulated streams of known truth, no server.

Drives the project's real verdict code (pipeline.gates: the percentile verdict with its
blocks and design effect, the sequential window loop with its re-measures, the exact
error-rate gate, the memory-growth rate gate) with simulated latency streams
(benchmarks/calibration_streams.py: independent, batches of 8 sharing a latency, AR(1)
drift rho = 0.98, rare stalls), each for a p99 and a p95 gate, at 0.8, 0.9, 1.0 and
1.25 x the threshold, under the latency stage's defaults (3 to 6 windows, 95%),
`WINDOW_REQUESTS` requests a window (what stages.latency.window_requests asks for).

    python benchmarks/calibration.py [--trials 400] [--seed 1]
    python benchmarks/calibration.py --real [--runs 10]

Prints a table per case and percentile (passed / failed / inconclusive share of trials at
each factor), then one JSON line: false_pass_at_threshold_max (over the cases and both
percentiles: passed at 1.0 x),
false_refusal_at_0_8_max (failed or inconclusive at 0.8 x), refusal_at_0_9_max,
decided_fail_at_1_25_min, error_rate_pass_at_2x (a server at twice its error SLO),
leak_refused (a 4 KiB/request leak not passed), capacity_pass_above_10pct (a hold at
1.1 x the true capacity passed: from benchmarks/calibration_capacity.py where it exists,
else today's hold judged on benchmarks/calibration_hold.py's simulated queue).
`--real` promotes the bundled examples instead, on real servers in a scratch copy under a
busy neighbour (benchmarks/calibration_real.py), and prints one JSON line with aa_runs,
aa_refused, each refusal's reason and the median promote time.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.calibration_hold import hold_pass_rate  # noqa: E402
from benchmarks.calibration_real import real_runs  # noqa: E402
from benchmarks.calibration_streams import CASES, stream, true_quantile_us  # noqa: E402
from pipeline.gates.error_rate import error_rate_gate  # noqa: E402
from pipeline.gates.evidence import split_blocks  # noqa: E402
from pipeline.gates.latency import plan_for  # noqa: E402
from pipeline.gates.memory_growth import DEFAULT_RATE, leak_rate_of, rate_gate  # noqa: E402
from pipeline.gates.percentile_verdict import Evidence, PercentileVerdict, judge_percentile  # noqa: E402
from pipeline.gates.samples import SortedBlock  # noqa: E402
from pipeline.spec.stage_settings import StabilitySpec  # noqa: E402
from pipeline.statistics.sequential import run_windows  # noqa: E402

WINDOW_REQUESTS = 2000
FACTORS = (0.8, 0.9, 1.0, 1.25)
CONFIDENCE = 0.95
PERCENTILES = (99.0, 95.0)
PLAN = plan_for(StabilitySpec(), CONFIDENCE)


class _Look:
    def __init__(self, verdict: PercentileVerdict) -> None:
        self.verdict = verdict
        self.decided = verdict.outcome != "inconclusive"
        self.outlier = None if verdict.outlier is None else verdict.outlier.window


def judge(windows: list[list[float]], percentile: float, threshold_ms: float,
          alpha: float) -> PercentileVerdict:
    pooled = SortedBlock(sorted(value for window in windows for value in window))
    evidence = Evidence(pooled, tuple(split_blocks(w) for w in windows),
                        tuple(float(np.percentile(w, percentile)) / 1e3 for w in windows))
    return judge_percentile(evidence, percentile, threshold_ms, alpha)


def percentile_trial(case: str, percentile: float, factor: float,
                     rng: np.random.Generator) -> str:
    """One latency stage against a stream whose true percentile is `factor` x the
    threshold."""
    threshold_ms = true_quantile_us(case, percentile / 100) / factor / 1e3
    next_latencies = stream(case, rng)
    run = run_windows(lambda _: [float(v) for v in next_latencies(WINDOW_REQUESTS)],
                      lambda windows, alpha: _Look(judge(windows, percentile, threshold_ms,
                                                         alpha)),
                      lambda _: None, PLAN)
    assert run.last is not None
    return run.last.verdict.outcome


def percentile_table(trials: int, seed: int) -> dict[str, dict[float, Counter[str]]]:
    table: dict[str, dict[float, Counter[str]]] = {}
    for index, case in enumerate(CASES):
        for percentile in PERCENTILES:
            name = f"{case} p{percentile:g}"
            table[name] = {}
            for factor in FACTORS:
                # p99's streams as before p95 was added; p95's of their own.
                tail = [] if percentile == 99.0 else [int(percentile)]
                rng = np.random.default_rng([seed, index, int(factor * 100), *tail])
                table[name][factor] = Counter(percentile_trial(case, percentile, factor, rng)
                                              for _ in range(trials))
    return table


def error_rate_pass(trials: int, seed: int, multiple: float, requests: int = 6000,
                    slo: float = 0.001) -> float:
    """Share of runs passed by the error-rate gate at `multiple` x its SLO."""
    rng = np.random.default_rng([seed, 99, int(multiple * 100)])
    errors = rng.binomial(requests, slo * multiple, size=trials)
    alpha = 1 - CONFIDENCE
    return sum(error_rate_gate(int(e), requests, slo, alpha).outcome == "passed"
               for e in errors) / trials


def leak_refused(trials: int, seed: int, kib_per_request: float, rate: float = 800.0,
                 seconds: float = 10.0) -> float:
    """Share of runs in which the memory-growth gate does not pass a leak of this size:
    RSS sampled every 0.2 s over `seconds` of windows at `rate` requests/s, with
    allocator noise (0.5 MiB jitter, and 1 MiB steps either way, one sample in ten)."""
    rng = np.random.default_rng([seed, 77, int(kib_per_request * 100)])
    refused = 0
    windows = 6
    for _ in range(trials):
        length = seconds / windows
        spans = [(i * length, (i + 1) * length, int(rate * length)) for i in range(windows)]
        times = np.arange(0.0, seconds + 1e-9, 0.2)
        steps = np.cumsum(rng.choice([-1.0, 0.0, 1.0], size=len(times), p=[0.05, 0.9, 0.05]))
        rss = (400 + kib_per_request * rate * times / 1024 + steps
               + rng.normal(0, 0.5, size=len(times)))
        gate = rate_gate(leak_rate_of(list(zip(times.tolist(), rss.tolist(), strict=True)),
                                      spans, 1 - CONFIDENCE), DEFAULT_RATE)
        refused += gate.outcome != "passed"
    return refused / trials


def capacity_figures(trials: int, seed: int) -> tuple[float, str]:
    """A hold at 1.1 x the true capacity: passed share. From the capacity search's own
    calibration where it exists, else today's hold on a queue simulation."""
    try:
        module = importlib.import_module("benchmarks.calibration_capacity")
    except ImportError:
        return (hold_pass_rate(trials, seed, 1.1),
                "today's capacity hold on a simulated queue (benchmarks/calibration_hold.py)")
    rates = module.capacity_pass_rates(trials, seed)
    return float(rates["capacity_pass_above_10pct"]), "benchmarks/calibration_capacity.py"


def share(counts: Counter[str], *outcomes: str) -> float:
    return sum(counts[o] for o in outcomes) / max(sum(counts.values()), 1)


def print_table(table: dict[str, dict[float, Counter[str]]]) -> None:
    print(f"{'case':<16}{'x threshold':>12}{'passed':>9}{'failed':>9}{'inconcl.':>10}")
    for case, by_factor in table.items():
        for factor, counts in by_factor.items():
            print(f"{case:<16}{factor:>12.2f}{share(counts, 'passed'):>9.3f}"
                  f"{share(counts, 'failed'):>9.3f}{share(counts, 'inconclusive'):>10.3f}")


def summary(table: dict[str, dict[float, Counter[str]]], trials: int,
            seed: int) -> dict[str, Any]:
    capacity, capacity_note = capacity_figures(trials, seed)
    return {
        "false_pass_at_threshold_max": max(share(t[1.0], "passed") for t in table.values()),
        "false_refusal_at_0_8_max": max(share(t[0.8], "failed", "inconclusive")
                                        for t in table.values()),
        "refusal_at_0_9_max": max(share(t[0.9], "failed", "inconclusive")
                                  for t in table.values()),
        "decided_fail_at_1_25_min": min(share(t[1.25], "failed") for t in table.values()),
        "error_rate_pass_at_2x": error_rate_pass(trials, seed, 2.0),
        "error_rate_pass_at_0_5x": error_rate_pass(trials, seed, 0.5),
        "leak_refused": leak_refused(trials, seed, 4.0),
        "no_leak_refused": leak_refused(trials, seed, 0.0),
        "capacity_pass_above_10pct": capacity,
        "capacity_note": capacity_note,
        "trials": trials, "window_requests": WINDOW_REQUESTS,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--real", action="store_true",
                        help="promote the bundled examples under a busy neighbour instead")
    parser.add_argument("--runs", type=int, default=10, help="--real: promotions per example")
    args = parser.parse_args(argv)
    if args.real:
        print(json.dumps(real_runs(args.runs)))
        return
    table = percentile_table(args.trials, args.seed)
    print_table(table)
    print(json.dumps(summary(table, args.trials, args.seed)))


if __name__ == "__main__":
    main()
