"""`report`: render a run's record, or the one a release was verified with."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from pipeline.cli.common import DEFAULT_SPEC, SpecFile, out
from pipeline.cli.github import job_summary
from pipeline.errors import UsageError
from pipeline.report.formats import Format


def report(identifier: Annotated[str, typer.Argument(metavar="RUN_ID|RELEASE_ID")],
           file: SpecFile = DEFAULT_SPEC,
           output: Annotated[Format, typer.Option(
               "--format", help="terminal, json, html (one offline file), svg, markdown "
               "(also appended to $GITHUB_STEP_SUMMARY when set)")] = "terminal",
           env: Annotated[str | None, typer.Option(
               "--env", help="Show the release against what is live in ENV (default: the "
               "last environment it was promoted to, else where it was verified).")] = None,
           ) -> None:
    """Show a run's record, or the record a release was verified with."""
    from pipeline.cli.records import find_record, release_evidence
    from pipeline.release.store import store_for
    from pipeline.report.formats import baseline_for, render
    from pipeline.report.release_terminal import release_terminal
    from pipeline.report.terminal import render_terminal
    from pipeline.servers.specs import load_spec
    from pipeline.spec.loading import environment_names
    loaded = load_spec(file, None)
    if env is not None and env not in environment_names(loaded.workspace):
        known = ", ".join(environment_names(loaded.workspace)) or "none"
        raise UsageError(f"--env {env}: no such environment (environments/*.yaml next to "
                         f"{file}: {known})")
    record = find_record(loaded, identifier)
    if output == "terminal":
        out().print(render_terminal(record))
        evidence = release_evidence(loaded, record.release_id, env)
        if evidence is not None:
            out().print(release_terminal(evidence))
        return
    rendered = output in ("html", "markdown")
    baseline = baseline_for(store_for(loaded), loaded.spec.name, record) if rendered else None
    release = release_evidence(loaded, record.release_id, env) if rendered else None
    text = render(record, output, baseline, release=release)
    sys.stdout.write(text)
    if output == "markdown":
        job_summary(text)
