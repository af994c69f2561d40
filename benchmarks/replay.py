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
  the client fell behind (client_bound);
- pacer_only_lag_p99_ms: the pacer alone on the log's first 10 s, nothing sent and no
  server busy: the schedule error this machine allows a process at all.

    python benchmarks/replay.py [--seconds 60] [--rate 1000] [--arrivals poisson|constant]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.replay_log import arrival_times, log_lines  # noqa: E402
from pipeline.context import RunContext  # noqa: E402
from pipeline.measure.pacing import Pacer, schedule_rate  # noqa: E402
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


async def pacer_only_lag_p99_ms(offsets: list[float], seconds: float = 10.0) -> float:
    """The schedule error of the pacer alone over the log's first `seconds`, nothing sent:
    what this machine allows this process whatever the replay does."""
    kept = [offset for offset in offsets if offset < seconds]
    pacer = Pacer(schedule_rate(kept[0], kept[-1], len(kept)) if kept else None)
    start = time.perf_counter() + 0.1
    lags = []
    try:
        for offset in kept:
            await pacer.until(start + offset)
            lags.append(time.perf_counter() - start - offset)
    finally:
        pacer.close()
    lags.sort()
    return lags[min(len(lags) - 1, int(len(lags) * 0.99))] * 1e3


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
        idle = asyncio.run(pacer_only_lag_p99_ms([t - times[0] for t in times]))
        loaded = load_spec(REPO / "serve.yaml.example")
        result: dict[str, Any] = {"replay_log_s": args.seconds, "replay_log_rps": args.rate,
                                  "replay_log_arrivals": args.arrivals,
                                  "replay_log_requests": float(len(times)),
                                  "pacer_only_lag_p99_ms": round(idle, 3)}
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
