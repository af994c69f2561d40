"""Writes a request log for `stages.replay`: JSON lines `{"t": ..., "inputs": {...}}`.

Arrivals at `--rate` per second for `--seconds`, evenly spaced or Poisson (`--arrivals`),
with times in seconds from `--start` (a Unix time; ISO 8601 with `--iso`). Each request's
inputs are random numbers of the example model's input (`features`, 16 float32), or none
with `--times-only` (the payloads then come from stages.replay.data).

    python benchmarks/replay_log.py --rate 1000 --seconds 60 --out requests.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from datetime import UTC, datetime
from pathlib import Path

FEATURES = 16


def arrival_times(rate: float, seconds: float, arrivals: str, seed: int) -> list[float]:
    rng = random.Random(seed)
    if arrivals == "constant":
        return [index / rate for index in range(round(rate * seconds))]
    times, at = [], rng.expovariate(rate)
    while at < seconds:
        times.append(at)
        at += rng.expovariate(rate)
    return times


def log_lines(times: list[float], start: float, iso: bool, times_only: bool,
              seed: int) -> list[str]:
    rng = random.Random(seed + 1)
    lines = []
    for offset in times:
        moment = start + offset
        line: dict[str, object] = {
            "t": datetime.fromtimestamp(moment, UTC).isoformat(timespec="microseconds")
            if iso else round(moment, 6)}
        if not times_only:
            line["inputs"] = {"features": [round(rng.uniform(-1, 1), 4)
                                           for _ in range(FEATURES)]}
        lines.append(json.dumps(line, separators=(",", ":")))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--arrivals", choices=("constant", "poisson"), default="constant")
    parser.add_argument("--start", type=float, default=1_764_754_500.0)
    parser.add_argument("--iso", action="store_true")
    parser.add_argument("--times-only", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    times = arrival_times(args.rate, args.seconds, args.arrivals, args.seed)
    lines = log_lines(times, args.start, args.iso, args.times_only, args.seed)
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
