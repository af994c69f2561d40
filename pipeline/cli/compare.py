"""`serve-pipeline compare`: the same spec served by two server kinds, measured fairly."""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Any, Literal

import typer

from pipeline.cli.common import DEFAULT_SPEC, SpecFile
from pipeline.cli.github import job_summary
from pipeline.errors import PipelineFailed

CompareFormat = Literal["terminal", "json", "html", "markdown"]


def compare(file: SpecFile = DEFAULT_SPEC,
            servers: Annotated[str, typer.Option(
                "--servers", help="The two server kinds to compare.")] = "triton,torchserve",
            tuned: Annotated[bool, typer.Option(
                "--tuned", help="Run `tune` for each kind first and compare each at its "
                "recommended config (the spec's `tune:` block and budget).")] = False,
            output: Annotated[CompareFormat, typer.Option(
                "--format", help="terminal, json, html, markdown (also appended to "
                "$GITHUB_STEP_SUMMARY when set)")] = "terminal",
            rounds: Annotated[int, typer.Option(
                "--rounds", help="Interleaved rounds over every load point.")] = 3,
            window: Annotated[float | None, typer.Option(
                "--window", help="Seconds per window (default: "
                "stages.saturation.probe_duration).")] = None,
            max_concurrency: Annotated[int | None, typer.Option(
                "--max-concurrency", help="Highest load point (default: "
                "stages.saturation.max_concurrency).")] = None,
            instances: Annotated[str | None, typer.Option(
                "--instances", help="Per kind, in place of server.instances: "
                "e.g. triton=2,torchserve=1.")] = None,
            no_capacity: Annotated[bool, typer.Option(
                "--no-capacity", help="Skip each server's open-loop capacity search "
                "after the windows (stages.saturation.capacity).")] = False,
            no_exception_probe: Annotated[bool, typer.Option(
                "--no-exception-probe", help="Skip starting each kind once more with a "
                "model that raises.")] = False,
            ) -> None:
    """Serve the spec with both server kinds, one at a time, and compare them in
    interleaved windows, then search each one's open-loop capacity at the SLO: capacity,
    the closed-loop knee, latency curves, cold start, memory, batching, the failure path,
    and a verdict with its confidence. Publishes nothing."""
    from rich.console import Console

    from pipeline.compare.run import Options, run_compare
    from pipeline.compare.translate import parse_instances, parse_kinds
    from pipeline.report.sidebyside.html import render_sidebyside_html
    from pipeline.report.sidebyside.markdown import render_sidebyside_markdown
    from pipeline.report.sidebyside.terminal import render_sidebyside_terminal
    from pipeline.servers.specs import load_spec
    kinds = parse_kinds(servers)
    loaded = load_spec(file)
    err = Console(stderr=True, highlight=False, markup=False)
    options = Options(rounds, window, max_concurrency, parse_instances(instances, kinds),
                      exception_probe=not no_exception_probe, tuned=tuned,
                      capacity=not no_capacity)
    record, run_dir = run_compare(loaded, kinds, options,
                                  dict(os.environ),
                                  lambda line: err.print(f"· {line}", style="dim"))
    html = render_sidebyside_html(record)
    markdown = render_sidebyside_markdown(record)
    (run_dir / "report.html").write_text(html, encoding="utf-8")
    (run_dir / "summary.md").write_text(markdown, encoding="utf-8")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        job_summary(markdown)
    if output == "json":
        sys.stdout.write(json.dumps(record, indent=2) + "\n")
    elif output == "html":
        sys.stdout.write(html)
    elif output == "markdown":
        sys.stdout.write(markdown)
    else:
        out = Console(highlight=False, markup=False, soft_wrap=True,
                      width=None if sys.stdout.isatty() else 160)
        out.print(render_sidebyside_terminal(record))
        out.print(f"record: {run_dir / 'comparison.json'}  report: {run_dir / 'report.html'}")
    if not any(s.get("status") == "measured" for s in record["servers"].values()):
        raise PipelineFailed(f"compare {record['compare_id']}: no server could be measured "
                             f"({verdict_text(record)})")


def verdict_text(record: dict[str, Any]) -> str:
    return str(record.get("verdict", {}).get("line", ""))
