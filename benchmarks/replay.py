"""Replay schedule error: a 60 s request log at 1,000 requests/s replayed by the replay
stage against the example model on a local Triton, from one process and from 2 Ray load
workers (a local Ray on loopback, started and shut down here).

The log (benchmarks/replay_log.py: Poisson arrivals, or evenly spaced with
--arrivals constant; the example's 16-float inputs on every
line) is written to a temporary folder. Each replay runs `stages.replay` as a run would
(its 1 s warm-up, then the log at 1.0x). Reported, as one JSON line at the end:

- replay_schedule_error_p99_ms / replay_schedule_error_p99_ms_2_workers: the p99 of each
  request's actual send time against its logged time, shifted to the replay's start
  (goal < 1 ms);
- the same runs' p99 latency from the logged instants, requests sent, errors, and whether
  the client fell behind (client_bound).

    python benchmarks/replay.py [--seconds 60] [--rate 1000] [--arrivals poisson|constant]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.replay_log import arrival_times, log_lines  # noqa: E402
from pipeline.context import RunContext  # noqa: E402
from pipeline.servers import serving  # noqa: E402
from pipeline.servers.base import ModelServer  # noqa: E402
from pipeline.servers.specs import load_spec, validate_spec  # noqa: E402
from pipeline.spec.models import LoadedSpec  # noqa: E402
from pipeline.stage_result import StageResult  # noqa: E402
from stages import replay  # noqa: E402


def replayed(server: ModelServer, loaded: LoadedSpec, log: Path, workers: int,
             folder: Path) -> StageResult:
    body = loaded.spec.model_dump(mode="json")
    body["stages"]["replay"] = {"log": str(log), "workers": workers}
    spec = validate_spec(body)
    with ExitStack() as resources:
        ctx = RunContext(dataclasses.replace(loaded, spec=spec), "benchmark", folder, {},
                         resources, server=server)
        return replay.run(ctx)


def figures(result: StageResult, suffix: str) -> dict[str, Any]:
    metrics = result.metrics
    return {f"replay_schedule_error_p99_ms{suffix}": round(metrics["schedule_lag_p99_ms"], 3),
            f"replay_schedule_error_max_ms{suffix}": round(metrics["schedule_lag_max_ms"], 3),
            f"replay_p99_ms{suffix}": round(metrics["p99_ms"], 2),
            f"replay_requests{suffix}": metrics["requests"],
            f"replay_errors{suffix}": metrics["errors"],
            f"replay_client_bound{suffix}": metrics["client_bound"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--arrivals", choices=("poisson", "constant"), default="poisson")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="serve-pipeline-replay-"))
    try:
        log = folder / "requests.jsonl"
        times = arrival_times(args.rate, args.seconds, args.arrivals, 0)
        log.write_text("\n".join(log_lines(times, 1_764_754_500.0, False, False, 0)) + "\n")
        loaded = load_spec(REPO / "serve.yaml.example")
        result: dict[str, Any] = {"replay_log_s": args.seconds, "replay_log_rps": args.rate,
                                  "replay_log_arrivals": args.arrivals,
                                  "replay_log_requests": float(len(times))}
        with serving(loaded, folder / "server") as server:
            for workers, suffix in ((1, ""), (2, "_2_workers")):
                outcome = replayed(server, loaded, log, workers, folder)
                print(f"{workers} worker(s): {outcome.message}", file=sys.stderr)
                result.update(figures(outcome, suffix))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
