"""`report`: render a run's record, or the one a release was verified with."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from pipeline.cli.common import DEFAULT_SPEC, SpecFile, out
from pipeline.cli.github import job_summary
from pipeline.report.formats import Format


def report(identifier: Annotated[str, typer.Argument(metavar="RUN_ID|RELEASE_ID")],
           file: SpecFile = DEFAULT_SPEC,
           output: Annotated[Format, typer.Option(
               "--format", help="terminal, json, html (one offline file), svg, markdown "
               "(also appended to $GITHUB_STEP_SUMMARY when set)")] = "terminal",
           ) -> None:
    """Show a run's record, or the record a release was verified with."""
    from pipeline.cli.records import find_record
    from pipeline.release.store import store_for
    from pipeline.report.formats import baseline_for, render
    from pipeline.report.terminal import render_terminal
    from pipeline.spec.loading import load_spec
    loaded = load_spec(file, None)
    record = find_record(loaded, identifier)
    if output == "terminal":
        out.print(render_terminal(record))
        return
    baseline = baseline_for(store_for(loaded), loaded.spec.name, record) \
        if output in ("html", "markdown") else None
    text = render(record, output, baseline)
    sys.stdout.write(text)
    if output == "markdown":
        job_summary(text)
