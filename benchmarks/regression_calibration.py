"""The paired regression verdict's error rates, measured on simulated streams (no server).

Each simulated round gives both servers one window of figures: a machine factor shared
by the round (slow drift as a random walk), independent window noise (log-normal; wider
for p99 than p50), and in 5% of windows a neighbour's burst that slows that window's
tail by 10-50% (it lands on one server, not both: the case a paired design must absorb).
Errors are Poisson at 1 in 8,000 requests on both sides. The candidate is the live
release slowed by a factor (latencies times it, throughput divided by it); the verdict
is the real one (pipeline/regression/paired.py) with the default settings.

    python benchmarks/regression_calibration.py [--trials 2000] [--seed 1] [--noise-scale 1]

Window noise (log-normal sigma): p50 2%, p95 4%, p99 6%, throughput 3%, the spread of
1 s windows at concurrency 8 on an idle machine; --noise-scale 1.5 for a noisier one.

Cases: A/A (factor 1.00), 25% slower, 3% slower, each with a 10% margin. The gate is
refused on "regression" and on "inconclusive" (it fails closed), so `aa_refused` and
`false_alarms` count both, `detected` counts refusals of the 25% slower candidate.
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline.regression.paired import (  # noqa: E402
    WATCHABLE,
    PairedRound,
    PairedSettings,
    Schedule,
    WindowFigures,
    run_sequential,
)

BASE = {"p50_ms": 4.0, "p95_ms": 6.0, "p99_ms": 8.0, "throughput_rps": 1500.0}
NOISE = {"p50_ms": 0.02, "p95_ms": 0.04, "p99_ms": 0.06, "throughput_rps": 0.03}
REQUESTS = 1500
ERROR_RATE = 1 / 8000
SETTINGS = PairedSettings(WATCHABLE, margin=0.10, error_rate_allowance=0.001,
                          confidence=0.95, schedule=Schedule(16, 16, 64))


def _poisson(rng: random.Random, mean: float) -> int:
    limit, count, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        count += 1
        product *= rng.random()
    return count


def _window(rng: random.Random, machine: float, factor: float,
            noise_scale: float) -> WindowFigures:
    burst = 1 + rng.uniform(0.1, 0.5) if rng.random() < 0.05 else 1.0
    figures = {}
    for metric, base in BASE.items():
        noise = math.exp(rng.gauss(0, NOISE[metric] * noise_scale))
        tail = burst if metric in ("p95_ms", "p99_ms") else 1 + (burst - 1) / 4
        if metric == "throughput_rps":
            figures[metric] = base / factor / machine / (1 + (burst - 1) / 4) * noise
        else:
            figures[metric] = base * factor * machine * tail * noise
    return WindowFigures(figures["p50_ms"], figures["p95_ms"], figures["p99_ms"],
                         figures["throughput_rps"], _poisson(rng, ERROR_RATE * REQUESTS),
                         REQUESTS)


def trial(rng: random.Random, factor: float, noise_scale: float) -> tuple[str, int]:
    drift = [1.0]

    def next_round(index: int) -> PairedRound:
        drift[0] *= math.exp(rng.gauss(0, 0.02))
        candidate = _window(rng, drift[0], factor, noise_scale)
        live = _window(rng, drift[0], 1.0, noise_scale)
        return PairedRound(candidate, live)

    verdict, rounds = run_sequential(next_round, SETTINGS)
    return verdict.outcome, len(rounds)


def case(rng: random.Random, factor: float, trials: int,
         noise_scale: float) -> dict[str, object]:
    outcomes: Counter[str] = Counter()
    rounds = []
    for _ in range(trials):
        outcome, used = trial(rng, factor, noise_scale)
        outcomes[outcome] += 1
        rounds.append(used)
    rounds.sort()
    return {"factor": factor, "trials": trials, **{k: outcomes[k] for k in
            ("no_regression", "regression", "inconclusive")},
            "refused_rate": round(1 - outcomes["no_regression"] / trials, 4),
            "median_rounds": rounds[len(rounds) // 2]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--noise-scale", type=float, default=1.0,
                        help="multiply every window's noise (1.5: a noisier machine)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    cases = {name: case(rng, factor, args.trials, args.noise_scale)
             for name, factor in (("aa", 1.0), ("slower_25", 1.25), ("slower_3", 1.03))}
    for name, figures in cases.items():
        print(f"{name}: {figures}", file=sys.stderr)
    print(json.dumps({
        "aa_refused_rate": cases["aa"]["refused_rate"],
        "aa_false_regression_rate": round(int(str(cases["aa"]["regression"])) / args.trials, 4),
        "detected_rate_25": cases["slower_25"]["refused_rate"],
        "false_alarm_rate_3": cases["slower_3"]["refused_rate"],
        "noise_scale": args.noise_scale, "margin": SETTINGS.margin,
        "confidence": SETTINGS.confidence, "cases": cases}))


if __name__ == "__main__":
    main()
