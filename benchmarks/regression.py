"""Does the side-by-side regression check tell a slower release from the live one?

In a scratch copy of the project, the example model (as `format: eager`, wrapped so that
it can sleep a fixed time per execution) is promoted to staging: that is the live
release. Then, `--runs` times and alternating the order, three candidates are verified
against it with `serve-pipeline run --env staging` (which publishes, never moves the
pointer, so the live release stays the same):

- A/A: the live release's own bytes (delay 0);
- 25% slower: a delay per execution of 25% of the live release's compute time per
  execution (from its latency stage: the server's compute input + infer + output);
- 3% slower, the same with 3%, against the default 10% margin.

A neighbour process keeps one of the machine's cores busy throughout. A run that the
check refuses (regression, or inconclusive: the gate fails closed) counts against
`aa_regressions` and `false_alarms`, and for `detected`. Each A/A run is paired with a
run of the same candidate with the check off (`gate: false`), for the wall time of a
run with and without the side-by-side check. The check's cost, `added_to_latency`, is the
wall time it adds (the median run with it less the median without) over the latency
stage's time in the runs without it (goal: at most 2): it also holds the live release's
shutdown, which the regression stage's own time over the latency stage's in the same run
(`regression_to_latency`) does not. A run that fails
before the check (its own SLO gates, on a busy machine) is counted in `not_judged`, not as
a refusal.

    python benchmarks/regression.py [--runs 10] [--skip-saturation] [--walls N]
                                    [--settings 'window: 500ms']

(`--walls N`: only the first N A/A runs get their run without the check.)

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# The example's MLP (examples/mlp/net.py, same state_dict keys) with a sleep per
# execution; self-contained, as only this file travels into the served artifact.
DELAYED = """import time

import torch
from torch import nn

DELAY_S = {delay!r}


class Delayed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64),
                                    nn.ReLU(), nn.Linear(64, 4))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if DELAY_S:  # a spin, not a sleep: sleep overshoots ~50-100 us (timer slack)
            until = time.perf_counter() + DELAY_S
            while time.perf_counter() < until:
                pass
        return torch.softmax(self.layers(features), dim=-1)


def build() -> torch.nn.Module:
    return Delayed()
"""


def scratch_project(folder: Path, skip_saturation: bool) -> Path:
    shutil.copytree(REPO / "examples", folder / "examples",
                    ignore=shutil.ignore_patterns("__pycache__", ".serve-pipeline"))
    shutil.copytree(REPO / "environments", folder / "environments")
    text = (REPO / "serve.yaml.example").read_text()
    text = text.replace("source: examples/mlp/model.pt", "source: examples/mlp/weights.pt")
    text = text.replace("format: torchscript",
                        "format: eager\n  entrypoint: examples/mlp/delayed.py:build")
    text = text.replace("  failure: {}", "  failure: {}\n  regression: {gate: true}")
    if skip_saturation:
        text = re.sub(r"(?m)^  saturation: .*$", "  saturation: {enabled: false}", text)
    (folder / "serve.yaml").write_text(text)
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    write_delay(folder, 0.0)
    return folder


def write_delay(project: Path, delay_s: float) -> None:
    (project / "examples" / "mlp" / "delayed.py").write_text(DELAYED.format(delay=delay_s))


def set_regression(project: Path, settings: str) -> None:
    spec = project / "serve.yaml"
    spec.write_text(re.sub(r"regression: \{[^}]*\}", f"regression: {{{settings}}}",
                           spec.read_text()))


def cli(project: Path, *args: str) -> tuple[dict[str, Any], float]:
    """Run the CLI; the record it wrote and its wall time."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=project, timeout=900,
                   capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    wall = time.monotonic() - started
    runs = sorted((project / ".serve-pipeline" / "runs").glob("*/record.json"),
                  key=lambda path: path.stat().st_mtime_ns)
    return json.loads(runs[-1].read_text()), wall


def stage(record: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(s for s in record["stages"] if s["name"] == name)
    return found


def compute_per_execution_s(record: dict[str, Any]) -> float:
    """Triton charges every request of a batch the whole execution's compute time, so the
    mean per request is the mean execution's."""
    metrics = stage(record, "latency")["metrics"]
    return sum(float(metrics.get(f"server_compute_{part}_us", 0.0))
               for part in ("input", "infer", "output")) / 1e6


def outcome_of(record: dict[str, Any]) -> dict[str, Any]:
    regression = stage(record, "regression")
    verdict = regression.get("details", {}).get("verdict") or {}
    return {"status": regression["status"], "outcome": verdict.get("outcome"),
            "rounds": verdict.get("rounds"), "run_status": record["status"],
            "regression_s": round(regression.get("duration_s", 0.0), 1),
            "latency_s": round(stage(record, "latency").get("duration_s", 0.0), 1),
            "ratios": {m["metric"]: m.get("ratio") for m in verdict.get("metrics", [])},
            "intervals": {m["metric"]: [m.get("ratio_low"), m.get("ratio_high")]
                          for m in verdict.get("metrics", [])},
            "message": regression.get("message", "")[:200],
            "p50_lag1": p50_lag1(regression.get("details", {}).get("windows", []))}


def p50_lag1(windows: list[dict[str, Any]]) -> float | None:
    """The lag-1 autocorrelation of the rounds' log p50 ratios: near 0 where rounds are
    independent, as the verdict's group-sequential levels assume."""
    rounds: dict[int, dict[str, float]] = {}
    for window in windows:
        rounds.setdefault(int(window["round"]), {})[str(window["server"])] = float(
            window["p50_ms"])
    logs = [math.log(pair["candidate"] / pair["live"]) for _, pair in sorted(rounds.items())
            if len(pair) == 2 and pair["candidate"] > 0 and pair["live"] > 0]
    if len(logs) < 4 or statistics.pstdev(logs) == 0:
        return None
    return round(statistics.correlation(logs[:-1], logs[1:]), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--skip-saturation", action="store_true",
                        help="turn the saturation stage off (it decides nothing here)")
    parser.add_argument("--walls", type=int, default=None, help=(
        "pair only the first N A/A runs with a run without the check (default: every one)"))
    parser.add_argument("--settings", default="", help=(
        "more stages.regression keys, as YAML flow items (e.g. 'window: 500ms, margin: 15%%')"))
    args = parser.parse_args()
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with tempfile.TemporaryDirectory(prefix="regression-bench-") as scratch:
            print(json.dumps(measure(Path(scratch), args.runs, args.skip_saturation,
                                     "gate: true" + (f", {args.settings}" if args.settings
                                                     else ""),
                                     args.runs if args.walls is None else args.walls)))
    finally:
        neighbour.kill()
        neighbour.wait()


def measure(scratch: Path, runs: int, skip_saturation: bool,
            settings: str, paired_walls: int) -> dict[str, Any]:
    project = scratch_project(scratch, skip_saturation)
    set_regression(project, settings)
    live, _ = cli(project, "promote", "staging")
    if live["status"] != "passed":
        raise SystemExit(f"the live release was not promoted: {live['status']}")
    per_execution = compute_per_execution_s(live)
    delays = {"aa": 0.0, "slower_25": 0.25 * per_execution, "slower_3": 0.03 * per_execution}
    cases: dict[str, list[dict[str, Any]]] = {name: [] for name in delays}
    walls: dict[str, list[float]] = {"with": [], "without": []}
    latency_alone: list[float] = []
    for index in range(runs):
        order = list(delays) if index % 2 == 0 else list(reversed(delays))
        for name in order:
            write_delay(project, delays[name])
            record, wall = cli(project, "run", "--env", "staging")
            cases[name].append({**outcome_of(record), "wall_s": round(wall, 1)})
            if name == "aa" and index < paired_walls:
                walls["with"].append(wall)
                set_regression(project, "gate: false")
                alone, without = cli(project, "run", "--env", "staging")
                walls["without"].append(without)
                latency_alone.append(float(stage(alone, "latency").get("duration_s", 0.0)))
                set_regression(project, settings)
        print(f"run {index + 1}/{runs}: " + ", ".join(
            f"{name} {cases[name][-1]['outcome']}" for name in delays), file=sys.stderr)

    def refused(name: str) -> int:
        return sum(run["status"] == "failed" for run in cases[name])

    return {"runs": runs, "aa_regressions": refused("aa"), "detected": refused("slower_25"),
            "false_alarms": refused("slower_3"),
            # A run that failed before the check (an SLO gate of its own) was not judged.
            "not_judged": {name: sum(run["status"] not in ("passed", "failed")
                                     for run in cases[name]) for name in cases},
            "outcomes": {name: dict(Counter(str(r["outcome"]) for r in cases[name]))
                         for name in cases},
            "median_wall_s_with_side_by_side": round(statistics.median(walls["with"]), 1),
            "median_wall_s_without": round(statistics.median(walls["without"]), 1),
            "delay_ms": {name: round(delay * 1e3, 4) for name, delay in delays.items()},
            # The check's cost: the wall time it adds to a run (with it, less without it),
            # over the latency stage's time in the runs without it (goal: <= 2).
            "added_to_latency": round(
                (statistics.median(walls["with"]) - statistics.median(walls["without"]))
                / statistics.median(latency_alone), 2),
            "median_latency_s_without": round(statistics.median(latency_alone), 1),
            # The regression stage's own time over the latency stage's, run by run.
            "regression_to_latency": cost_ratios(cases),
            "p50_lag1_median": statistics.median(
                [run["p50_lag1"] for runs in cases.values() for run in runs
                 if run["p50_lag1"] is not None] or [0.0]),
            "skip_saturation": skip_saturation, "settings": settings, "cases": cases}


def cost_ratios(cases: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """The regression stage's wall time over the latency stage's, per case: the median,
    and over every run the median and the largest."""
    ratios = {name: [run["regression_s"] / run["latency_s"] for run in runs
                     if run["latency_s"] > 0 and run["regression_s"] > 0]
              for name, runs in cases.items()}
    every = [ratio for values in ratios.values() for ratio in values]
    if not every:
        return {}
    return {**{f"{name}_median": round(statistics.median(values), 2)
               for name, values in ratios.items() if values},
            "median": round(statistics.median(every), 2), "max": round(max(every), 2)}


if __name__ == "__main__":
    main()
