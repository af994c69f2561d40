"""How much time does the pipeline add above what serving and measuring must take?

Runs `serve-pipeline promote staging` on the bundled example (in a scratch copy
of the project, so the repository's own store is untouched) and prints the wall
time of each stage, the floor, and the overhead ratio:

    floor    = server cold start + warm-up + every measurement window
               (latency windows as many as ran, saturation probes, burst phases)
               + the server's graceful shutdown (see below)
    overhead = (total wall time of the command - floor) / total

The server's graceful shutdown is shown on its own line. tritonserver spends
a little over 1 s per python-backend instance on it, one instance after another
(a fixed 1 s health check per stub before its finalize; the generated model.py
skips the interpreter's teardown after it), then up to 1 s of its own poll; the
run record reports it as a measured server behaviour (exit status, seconds),
and it overlaps publish.
Both ratios are printed: with the shutdown counted as the server's time (like
its cold start) and with it counted as the pipeline's overhead.

Then the time to a latency verdict: `verdict_s_clear` is the example's (from the
latency stage's start, warm-up included, to its decision), `verdict_s_close` that
of a copy whose p99 threshold sits 5% above the p99 just measured (p95 and the
latency budget dropped so the copy stays valid), measured with
`serve-pipeline run --stages latency`; `verdict_close` says how that one ended
(passed, failed or inconclusive: all three are honest answers near a threshold).

    python benchmarks/pipeline.py [--spec serve.yaml.example]

`preflight_s` is the time of the checks `promote` runs before its first stage (store,
server binary, ports, model source, disk), timed by `serve-pipeline doctor --env staging`.

The last line is one JSON object with the headline figures.
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

from pipeline.servers.specs import load_spec  # noqa: E402


def scratch_project(spec: Path) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="serve-pipeline-bench-"))
    shutil.copytree(REPO / "examples", folder / "examples",
                    ignore=shutil.ignore_patterns("__pycache__", ".serve-pipeline"))
    shutil.copytree(REPO / "environments", folder / "environments")
    shutil.copyfile(spec, folder / "serve.yaml")
    return folder


def floor_of(record: dict[str, Any], project: Path) -> dict[str, float]:
    spec = load_spec(project / "serve.yaml", "staging").spec
    stages = {stage["name"]: stage for stage in record["stages"]}
    saturation = stages["saturation"]
    probes = len(saturation["details"].get("probes", []))
    latency = stages["latency"]
    windows = int(latency["metrics"].get("windows", 1))
    parts = {
        "server cold start": stages["readiness"]["metrics"]["cold_start_s"],
        "latency warm-up": spec.stages.latency.warmup.seconds,
        # Windows repeat until the verdict is decided: each one is measurement time.
        f"latency windows ({windows})": windows * float(latency["details"]["window_s"]),
        f"saturation probes ({probes})": probes * spec.stages.saturation.probe_duration.seconds,
    }
    steps = saturation["details"].get("capacity_steps", [])
    if steps:
        parts[f"capacity steps ({len(steps)})"] = sum(step["duration_s"] for step in steps)
    burst = spec.stages.saturation.burst
    if burst is not None and "burst_p99_ms" in saturation["metrics"]:
        settle = burst.settle.seconds
        parts["burst phases"] = settle + burst.duration.seconds + max(
            settle, 2 * burst.duration.seconds)
    return parts


def latency_stage(record: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = next(s for s in record["stages"] if s["name"] == "latency")
    return found


def close_spec(project: Path, p99_ms: float) -> None:
    """Rewrite the project's spec with its p99 threshold 5% above `p99_ms`."""
    from ruamel.yaml import YAML

    yaml = YAML()
    path = project / "serve.yaml"
    body = yaml.load(path.read_text())
    body["slo"]["p99"] = f"{round(p99_ms * 1.05 * 1000)}us"
    for key in ("p95", "p50", "budget", "queue_mean"):
        body["slo"].pop(key, None)
    with path.open("w") as out:
        yaml.dump(body, out)


def time_to_close_verdict(spec: Path, p99_ms: float) -> tuple[float, str]:
    project = scratch_project(spec)
    try:
        close_spec(project, p99_ms)
        subprocess.run([sys.executable, "-m", "pipeline", "run", "--stages", "latency"],
                       cwd=project, capture_output=True, text=True, check=False)
        record_path = sorted((project / ".serve-pipeline" / "runs").glob("*/record.json"))[-1]
        latency = latency_stage(json.loads(record_path.read_text()))
    finally:
        shutil.rmtree(project, ignore_errors=True)
    gate = next(g for g in latency["gates"] if g["name"] == "latency.p99")
    return float(latency["metrics"]["verdict_s"]), str(gate.get("outcome"))


def preflight_seconds(project: Path) -> float:
    """The preflight checks `promote staging` runs before its first stage, timed by
    `serve-pipeline doctor --env staging` (the same checks, alone, in a fresh process)."""
    done = subprocess.run([sys.executable, "-m", "pipeline", "doctor", "--env", "staging",
                           "--format", "json"], cwd=project, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"preflight failed (exit {done.returncode})")
    return float(json.loads(done.stdout)["duration_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", type=Path, default=REPO / "serve.yaml.example")
    args = parser.parse_args()
    project = scratch_project(args.spec.resolve())
    try:
        preflight_s = preflight_seconds(project)
        started = time.monotonic()
        completed = subprocess.run(
            [sys.executable, "-m", "pipeline", "promote", "staging"], cwd=project,
            capture_output=True, text=True, check=False)
        total = time.monotonic() - started
        if completed.returncode != 0:
            sys.stderr.write(completed.stdout + completed.stderr)
            raise SystemExit(f"the pipeline failed (exit {completed.returncode})")
        record_path = sorted((project / ".serve-pipeline" / "runs").glob("*/record.json"))[-1]
        record = json.loads(record_path.read_text())
        floor_parts = floor_of(record, project)
    finally:
        shutil.rmtree(project, ignore_errors=True)

    print(f"{'stage':<14}{'wall s':>9}")
    for stage in record["stages"]:
        print(f"{stage['name']:<14}{stage['duration_s']:>9.2f}")
    publish_s = next(s["duration_s"] for s in record["stages"] if s["name"] == "publish")
    saturation_stage = next(s for s in record["stages"] if s["name"] == "saturation")
    saturation_s, saturation_metrics = saturation_stage["duration_s"], saturation_stage["metrics"]
    # The shutdown overlaps publish; only the part that outlasts it adds wall time.
    shutdown = max(0.0, float(record["teardown_s"]) - publish_s)
    print(f"{'(shutdown)':<14}{shutdown:>9.2f}   graceful tritonserver stop, overlapping publish")
    print(f"{'command total':<14}{total:>9.2f}   incl. interpreter start and imports")
    print()
    print("floor:")
    for name, seconds in floor_parts.items():
        print(f"  {name:<26}{seconds:>8.2f}")
    floor = sum(floor_parts.values())
    print(f"  {'server graceful shutdown':<26}{shutdown:>8.2f}")
    print(f"  {'total':<26}{floor + shutdown:>8.2f}")
    pipeline_overhead = (total - floor - shutdown) / total
    shutdown_as_overhead = (total - floor) / total
    print()
    print(f"pipeline overhead above the floor: {total - floor - shutdown:.2f}s = "
          f"{pipeline_overhead:.1%} of the total (goal < 10%)")
    print(f"counting the server's graceful shutdown ({shutdown:.2f}s) as overhead too: "
          f"{shutdown_as_overhead:.1%}")
    clear = latency_stage(record)
    verdict_s_close, verdict_close = time_to_close_verdict(args.spec.resolve(),
                                                           float(clear["metrics"]["p99_ms"]))
    print(f"preflight (the checks before the first stage): {preflight_s:.3f}s")
    print(f"time to a latency verdict: {clear['metrics']['verdict_s']:.2f}s clear, "
          f"{verdict_s_close:.2f}s with p99 threshold 5% above the measured p99 "
          f"({verdict_close})")
    print(json.dumps({"total_s": round(total, 3), "floor_s": round(floor + shutdown, 3),
                      "overhead_ratio": round(pipeline_overhead, 4),
                      "server_shutdown_s": round(shutdown, 3),
                      "overhead_ratio_shutdown_as_overhead": round(shutdown_as_overhead, 4),
                      "verdict_s_clear": round(float(clear["metrics"]["verdict_s"]), 3),
                      "verdict_s_close": round(verdict_s_close, 3),
                      "verdict_close": verdict_close,
                      "preflight_s": round(preflight_s, 3),

                      "capacity_rps": saturation_metrics.get("capacity_rps"),
                      "saturation_s": round(saturation_s, 3)}))


if __name__ == "__main__":
    main()
