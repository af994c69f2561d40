"""Does the capacity the saturation stage finds hold when offered again for 10 s?

For the example in TorchScript and ONNX form and a slow model of our own, in a scratch
copy of the project: `serve-pipeline run --stages saturation` with a 30 s capacity
budget and a 10 s confirmation hold, then the found `capacity_rps` is offered for 10 s
(open loop, latency from each request's intended start) to a fresh server with the same
config, warmed at that rate first, by a client with a capacity step's settings. Per
model it prints the knee, the capacity, and the re-measure's p99 against the SLO
(`p99_ratio` <= 1 and `error_rate` within the SLO's mean the capacity held).

    python benchmarks/capacity.py [--models torchscript,onnx,slow]

The last line is one JSON object: per model, and `held` (how many held).
On a 2-core machine the example's capacity sits where the load client itself needs a
whole core; a re-measure that falls behind its schedule (`client_bound`) says more about
the machine than the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from benchmarks.slow_net import SlowNet  # noqa: E402
from pipeline.measure.capacity_steps import STEP_TIMEOUT_SLO_MULTIPLE, step_in_flight  # noqa: E402
from pipeline.measure.drain import until_prompt  # noqa: E402
from pipeline.measure.loadgen import HardEnd, Phase, open_loop  # noqa: E402
from pipeline.model.tensors import load_samples, take  # noqa: E402
from pipeline.servers import serving  # noqa: E402
from pipeline.servers.specs import load_spec  # noqa: E402

CAPACITY = "capacity: {budget: 30s, step: 500ms, hold: 10s}, "


def make_project(scratch: Path, model: str) -> tuple[Path, Path, float]:
    """(spec, model file, SLO p99 in seconds) of a scratch project serving `model`."""
    project = scratch / model
    project.mkdir()
    shutil.copytree(REPO / "examples", project / "examples")
    shutil.copytree(REPO / "environments", project / "environments")
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    text = (REPO / "serve.yaml.example").read_text()
    if "  saturation: {" not in text:
        raise SystemExit("serve.yaml.example has no flow-style stages.saturation to extend")
    text = text.replace("  saturation: {", "  saturation: {" + CAPACITY, 1)
    model_file, slo_s = project / "examples/mlp/model.pt", 0.050
    if model == "onnx":
        text = text.replace("source: examples/mlp/model.pt", "source: examples/mlp/model.onnx")
        text = text.replace("format: torchscript", "format: onnx")
        model_file = project / "examples/mlp/model.onnx"
    elif model == "slow":
        torch.jit.save(torch.jit.script(SlowNet()), str(project / "slow.pt"))
        text = text.replace("source: examples/mlp/model.pt", "source: slow.pt")
        text = text.replace("p99: 50ms", "p99: 25ms").replace("p95: 30ms", "p95: 25ms")
        text = text.replace("min_throughput: 100/s", "min_throughput: 10/s")
        model_file, slo_s = project / "slow.pt", 0.025
    spec = project / "serve.yaml"
    spec.write_text(text)
    return spec, model_file, slo_s


def saturation(project: Path) -> dict[str, Any]:
    result = subprocess.run([sys.executable, "-m", "pipeline", "run", "--stages", "saturation"],
                            cwd=project, capture_output=True, text=True, timeout=900)
    records = sorted((project / ".serve-pipeline" / "runs").glob("*/record.json"),
                     key=lambda path: path.stat().st_mtime)
    if not records:
        raise SystemExit(f"no run record in {project}: {result.stderr[-2000:]}")
    record: dict[str, Any] = json.loads(records[-1].read_text())
    stage: dict[str, Any] = next(s for s in record["stages"] if s["name"] == "saturation")
    return stage


def remeasure(project: Path, spec: Path, model_file: Path, rate: float,
              slo_s: float) -> dict[str, Any]:
    """Offer `rate` for 10 s (open loop, from intended start) to a fresh server.

    The client is a capacity step's: requests time out at 4 x the SLO (above the SLO the
    p99 verdict is the same) with as many in flight as a step allows. The fresh server is
    first warmed at the same rate, so that the batch sizes that rate forms have run once
    (TorchScript and ONNX Runtime are slow on the first batches of a new size).
    """
    loaded = load_spec(spec)
    with serving(loaded, project / "remeasure", model_file=model_file) as server:
        samples = load_samples(loaded.spec.model, loaded.spec.stages.parity, loaded.workspace)
        target = server.infer_request(take(samples, 1))
        timeout_s, in_flight = STEP_TIMEOUT_SLO_MULTIPLE * slo_s, step_in_flight(rate, slo_s)
        asyncio.run(open_loop(target, [Phase("warm", rate, 2.0)], timeout_s,
                              max_in_flight=in_flight, hard_end=HardEnd(2.0 + timeout_s, 10.0)))
        asyncio.run(until_prompt(target, slo_s, 10.0))
        outcome = asyncio.run(open_loop(target, [Phase("steady", rate, 10.0)], timeout_s,
                                        max_in_flight=in_flight,
                                        hard_end=HardEnd(10.0 + timeout_s, 10.0)))
    steady = outcome.phases["steady"]
    return {"p99_ms": steady.percentile_ms(99), "error_rate": steady.error_rate,
            "samples": steady.histogram.get_total_count(), "client_bound": outcome.client_bound}




def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="torchscript,onnx,slow")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="capacity-bench-") as scratch:
        for model in args.models.split(","):
            spec, model_file, slo_s = make_project(Path(scratch), model)
            stage = saturation(spec.parent)
            metrics = stage["metrics"]
            capacity = metrics.get("capacity_rps")
            row: dict[str, Any] = {"knee_rps": metrics.get("knee_throughput_rps"),
                                   "capacity_rps": capacity,
                                   "capacity_bound": stage["details"].get("capacity_bound"),
                                   "saturation_s": stage["duration_s"]}
            if capacity:
                again = remeasure(spec.parent, spec, model_file, capacity, slo_s)
                row.update(remeasure_p99_ms=again["p99_ms"],
                           p99_ratio=round(again["p99_ms"] / (slo_s * 1e3), 3),
                           remeasure_error_rate=again["error_rate"],
                           client_bound=again["client_bound"],
                           held=again["p99_ms"] <= slo_s * 1e3 and again["error_rate"] <= 0.001)
            print(f"{model}: {row}", flush=True)
            results[model] = row
    held = sum(1 for row in results.values() if row.get("held"))
    print(json.dumps({**results, "held": held, "models": len(results)}))


if __name__ == "__main__":
    main()
