"""Do promote, `tune` and `compare` state the same capacity for one config?

On the bundled example (serve.yaml.example, Triton), in a scratch copy of the project, for
the spec's own config:
- `serve-pipeline run --stages saturation`: promote's saturation stage (its record's
  `details.capacity`), publishing nothing; alone, so that a latency verdict left
  undecided by short windows on a busy machine does not abort it (tune's verification
  runs the latency stage first, as promote does);
- `serve-pipeline tune` with its space restricted to the spec's config: tune always
  measures that config as its baseline (`tune.baseline.measured.capacity`);
- `serve-pipeline compare --servers triton,torchserve`: Triton's figure
  (`servers.triton.capacity`), from compare's own capacity search after its windows.

    python benchmarks/consistency.py [--quick]

The last line is one JSON object: `promote_capacity_rps`, `tune_capacity_rps` and
`compare_capacity_rps`, each {rps, low_rps, high_rps, bound: exact|lower_bound,
capped_by} (null, with the command's reason under `notes`, where no rate was confirmed),
and `agree`: true when the three intervals share a rate (a lower bound's interval has no
top). Each command's wall time and closed-loop knee (a diagnostic) come with them.

Decisions:
- The three figures come from the same capacity search (the saturation stage's, with the
  spec's `stages.saturation.capacity` settings) on the same config; what differs is the
  server process, the moment, and the closed-loop knee each search starts under (promote
  and tune: the knee search's probes; compare: its merged windows). So disagreement here
  is noise or a bug in how a command states its figure, not a difference of definition.
- "Agree" is an overlap of intervals, not a ratio: an interval says where the true
  capacity lies, and two overlapping ones cannot tell the figures apart.
- The commands run one after another, never two servers under load at once; compare's
  TorchServe side is measured and ignored here (compare needs two kinds).

Cost: the full run (the example's own stages; tune verifies 1 config; compare 3 rounds
of 2 s windows to concurrency 64, with its exception probes) takes about 8-10 minutes on
2 cores: run ~2 min, tune ~2 min, compare ~5 min. `--quick` (1 s probes, a 20 s capacity
budget, compare 2 rounds of 1 s windows without the exception probes) about 2 minutes;
its budget cannot fit a hold near the knee (a hold lasts `capacity.span`, 20 s by
default), so each command confirms the threshold hold only and states a lower bound, and
its agreement is that of three lower bounds: it proves the plumbing, not the figures.
One quick run here (2 cores shared with other measurements): promote, tune and
compare each "capacity ≥ 560/s (lower bound: capped by the time budget)", agree true, in
32 s, 28 s and 54 s; the knees (diagnostic) 4,486/s (promote) and 9,699/s (compare, a
lower bound at its concurrency cap of 64, from 1 s windows). The full run is the test:
one, nothing else on the 2 cores, 5 min: promote 6,678/s [6,678–6,956], tune 11,219/s
[11,219–12,465], compare 6,121/s [6,121–10,201], agree false, when each interval was the
search's bracket; with the calibrated interval (capacity_figure.py), 6 min: promote
8,220/s [7,473–10,789], tune 8,244/s [7,494–11,850], compare 8,222/s [7,475–11,420],
agree true (see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.statistics.capacity_figure import CapacityFigure  # noqa: E402

QUICK_STAGES = """
stages:
  readiness: {timeout: 120s}
  parity: {data: examples/mlp/samples.npz, atol: 1e-5, rtol: 1e-4}
  failure: {}
  latency: {concurrency: 8, warmup: 1s, duration: 3s}
  saturation: {max_concurrency: 64, probe_duration: 1s, capacity: {budget: 20s, step: 500ms}}
"""
QUICK_COMPARE = ["--rounds", "2", "--window", "1", "--no-exception-probe"]
# The spec's own server block as tune's whole space: its baseline is the only config.
ONLY_THE_SPECS_CONFIG = """
tune:
  instances: [{instances}]
  max_batch_size: [{size}]
  max_queue_delay: [{delay}]
  preferred_batch_sizes: [{preferred}]
  verify: 1
  explore_window: 1s
"""
TIMEOUT_S = 1200


def scratch_project(quick: bool) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="serve-pipeline-consistency-"))
    shutil.copytree(REPO / "examples", folder / "examples",
                    ignore=shutil.ignore_patterns("__pycache__", ".serve-pipeline"))
    shutil.copytree(REPO / "environments", folder / "environments")
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    text = (REPO / "serve.yaml.example").read_text()
    if quick:
        head, _, tail = text.partition("\nstages:\n")
        _, _, publish = tail.partition("\npublish:\n")
        text = head + "\n" + QUICK_STAGES + "\npublish:\n" + publish
    spec = folder / "serve.yaml"
    spec.write_text(text)
    spec.write_text(text + tune_block(spec))
    return folder


def tune_block(spec: Path) -> str:
    from pipeline.servers.specs import load_spec

    server = load_spec(spec).spec.server
    batching = server.batching
    return ONLY_THE_SPECS_CONFIG.format(
        instances=server.instances, size=batching.max_batch_size,
        delay=batching.max_queue_delay.text, preferred=list(batching.preferred_batch_sizes))


def cli(project: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=project,
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    seconds = time.monotonic() - started
    print(f"serve-pipeline {' '.join(args)}: exit {result.returncode} in {seconds:.0f}s",
          flush=True)
    return result, seconds


def newest_record(project: Path, command: str) -> dict[str, Any] | None:
    for path in sorted((project / ".serve-pipeline" / "runs").glob("*/record.json"),
                       key=lambda p: p.stat().st_mtime_ns, reverse=True):
        body: dict[str, Any] = json.loads(path.read_text())
        if body.get("command") == command:
            return body
    return None


def promote_figure(project: Path) -> tuple[CapacityFigure | None, dict[str, Any]]:
    result, seconds = cli(project, "run", "--stages", "saturation")
    record = newest_record(project, "run")
    stage = next((s for s in (record or {}).get("stages", []) if s["name"] == "saturation"),
                 None)
    if stage is None:
        return None, {"s": seconds, "note": f"no saturation stage: {result.stderr[-600:]}"}
    figure = CapacityFigure.from_json(stage["details"].get("capacity"))
    return figure, {"s": seconds, "knee_rps": stage["metrics"].get("knee_throughput_rps"),
                    "note": "" if figure else stage["message"]}


def tune_figure(project: Path) -> tuple[CapacityFigure | None, dict[str, Any]]:
    result, seconds = cli(project, "tune", "--budget", "10m")
    record = newest_record(project, "tune")
    baseline = ((record or {}).get("tune") or {}).get("baseline")
    if not baseline or not baseline.get("measured"):
        return None, {"s": seconds, "note": f"no measured baseline: {result.stderr[-600:]}"}
    figure = CapacityFigure.from_json(baseline["measured"].get("capacity"))
    return figure, {"s": seconds, "config": baseline["label"],
                    "space_size": record["tune"]["space_size"] if record else None,
                    "note": "" if figure else "; ".join(baseline["missed"]) or
                    f"no capacity confirmed ({baseline['measured']['throughput_source']})"}


def compare_figure(project: Path, quick: bool) -> tuple[CapacityFigure | None, dict[str, Any]]:
    result, seconds = cli(project, "compare", "--servers", "triton,torchserve",
                          "--format", "json", *(QUICK_COMPARE if quick else []))
    try:
        record: dict[str, Any] = json.loads(result.stdout)
    except json.JSONDecodeError:
        return None, {"s": seconds, "note": f"no comparison: {result.stderr[-600:]}"}
    triton = record["servers"]["triton"]
    figure = CapacityFigure.from_json(triton.get("capacity"))
    return figure, {"s": seconds, "knee_rps": triton.get("throughput_at_slo"),
                    "knee_lower_bound": triton.get("knee_lower_bound"),
                    "note": "" if figure else str(triton.get("capacity_note") or
                                                  triton.get("message"))}


def agree(figures: list[CapacityFigure | None]) -> bool:
    """True when every interval shares a rate with every other."""
    found = [f for f in figures if f is not None]
    if len(found) < len(figures):
        return False
    return max(f.low_rps for f in found) <= min(f.top for f in found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="short stages and a short compare (a try, not the result)")
    args = parser.parse_args()
    project = scratch_project(args.quick)
    try:
        promote, promote_info = promote_figure(project)
        tune, tune_info = tune_figure(project)
        compare, compare_info = compare_figure(project, args.quick)
    finally:
        shutil.rmtree(project, ignore_errors=True)
    figures = {"promote": promote, "tune": tune, "compare": compare}
    for name, figure in figures.items():
        print(f"{name}: {figure.text() if figure else 'no figure'}", flush=True)
    print(json.dumps({
        **{f"{name}_capacity_rps": figure.to_json() if figure else None
           for name, figure in figures.items()},
        "agree": agree(list(figures.values())),
        "quick": args.quick,
        "details": {"promote": promote_info, "tune": tune_info, "compare": compare_info},
        "notes": {name: info["note"] for name, info in
                  (("promote", promote_info), ("tune", tune_info), ("compare", compare_info))
                  if info.get("note")}}))


if __name__ == "__main__":
    main()
