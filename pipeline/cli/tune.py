"""`serve-pipeline tune`: search server.batching / server.instances for the highest
throughput that meets the spec's SLO; registered on the app in pipeline/cli/app.py."""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Annotated

import typer

from pipeline.cli.common import DEFAULT_SPEC, SpecFile, out
from pipeline.errors import Interrupted, PipelineFailed, UsageError


def _budget_seconds(text: str | None) -> float | None:
    from pydantic_core import PydanticCustomError

    from pipeline.spec.units import parse_duration
    if text is None:
        return None
    try:
        budget = parse_duration(text)
    except PydanticCustomError as exc:
        raise UsageError(f"--budget: {exc.message()}") from None
    if budget.ns <= 0:
        raise UsageError("--budget must be more than 0")
    return budget.seconds


def tune_command(
        file: SpecFile = DEFAULT_SPEC,
        env: Annotated[str | None, typer.Option("--env", help="Merge this environment's "
                                                "overlay first (its SLO is the target).")] = None,
        budget: Annotated[str | None, typer.Option(
            "--budget", help="Wall-time budget with a unit, e.g. 10m (default: tune.budget "
            "or 10m).")] = None,
        write: Annotated[bool, typer.Option(
            "--write", help="Write the recommended server block into the spec file, keeping "
            "its comments and layout.")] = False,
) -> None:
    """Search the server's batching and instance settings for the highest throughput that
    meets every SLO gate; nothing is published or promoted."""
    from pipeline.preflight import PreflightFailed
    from pipeline.record import RunRecord, runs_dir, write_record
    from pipeline.release.manifest import iso, utc_now
    from pipeline.report.tune import recommended_yaml, render_tune_html, render_tune_table
    from pipeline.runner import new_run_id
    from pipeline.servers.specs import load_spec
    from pipeline.tune.record import tune_record
    from pipeline.tune.search import run_tune, settings_for
    from pipeline.tune.write import write_recommendation
    seconds = _budget_seconds(budget)
    loaded = load_spec(file, env)
    settings = settings_for(loaded, seconds)
    run_id = new_run_id()
    run_dir = runs_dir(loaded.workspace) / run_id
    run_dir.mkdir(parents=True)
    started_at, started = iso(utc_now()), time.monotonic()
    try:
        outcome = run_tune(loaded, run_dir, dict(os.environ), settings,
                           report=lambda line: out().print(line, markup=False))
    except KeyboardInterrupt:
        raise Interrupted(f"tune {run_id} interrupted: every server it started was stopped; "
                          f"the candidates' records are under {run_dir}") from None
    except PreflightFailed:
        with contextlib.suppress(OSError):   # nothing ran: leave no empty run folder
            run_dir.rmdir()
        raise
    record = tune_record(loaded, run_id, outcome, settings, started_at,
                         time.monotonic() - started)
    write_record(run_dir / "record.json", RunRecord.from_json(record))
    (run_dir / "report.html").write_text(render_tune_html(record), encoding="utf-8")
    out().print(render_tune_table(record))
    section = record["tune"]
    out().print(section["why"], markup=False)
    out().print(f"record: {run_dir / 'record.json'}  report: {run_dir / 'report.html'}")
    if section["recommended"] is None:
        closest = section["closest"]
        shown = json.dumps(closest["config"]) if closest else "none"
        raise PipelineFailed(f"tune {run_id}: no config meets the SLO (closest: {shown})")
    out().print("recommended:\n" + recommended_yaml(section["recommended"]), markup=False)
    if write:
        comments = write_recommendation(loaded.path, section["recommended"])
        out().print(f"wrote the recommended server block into {loaded.path}")
        for comment in comments:
            out().print(f"  {comment}", markup=False)
