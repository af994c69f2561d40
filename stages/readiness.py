"""readiness: wait for the server and the model to report ready; record the cold start."""

from __future__ import annotations

from pipeline import metric_names as m
from pipeline.context import RunContext
from pipeline.measure.memory import process_tree_memory
from pipeline.outcomes.readiness import ReadinessOutcome
from pipeline.stage_result import StageResult, Status

NAME = "readiness"
USES_SERVER = True


def run(ctx: RunContext) -> StageResult:
    server = ctx.require_server()
    timeout = ctx.loaded.spec.stages.readiness.timeout
    cold_start = server.wait_ready(timeout.seconds)
    ctx.require_server()          # and its ports its own (a second server on one of them)
    memory = process_tree_memory(server.process_tree())
    measured = ReadinessOutcome(cold_start_s=cold_start, cold_rss_mb=memory[m.SERVER_RSS_MB])
    return StageResult(NAME, Status.PASSED,
                       f"ready after {cold_start:.2f}s (deadline {timeout})",
                       metrics=measured.to_json())
