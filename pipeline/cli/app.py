"""The command line: thin Typer commands over the core; errors and exit codes in one place.

The commands live in modules by concern (spec, run, release, report); this module puts them
on one Typer app, in the order `--help` lists them.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from pipeline import __version__
from pipeline.cli.compare import compare
from pipeline.cli.doctor import doctor
from pipeline.cli.github import annotate
from pipeline.cli.release_commands import (
    approve_command,
    history,
    releases_command,
    rollback_command,
    store_verify,
    verify_command,
)
from pipeline.cli.report_command import report
from pipeline.cli.run_commands import measure, promote, run_command
from pipeline.cli.spec_commands import schema, validate
from pipeline.cli.tune import tune_command
from pipeline.errors import PipelineError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Take a trained model to production through measured gates.")


def _print_version(wanted: bool) -> None:
    if wanted:
        sys.stdout.write(f"serve-pipeline {__version__}\n")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_print_version,
        help="Print the version and exit.")] = False) -> None:
    """Take a trained model to production through measured gates."""


app.command()(validate)
app.command()(schema)
app.command()(promote)
app.command(name="approve")(approve_command)
app.command(name="run")(run_command)
app.command()(measure)
app.command(name="rollback")(rollback_command)
app.command()(history)
app.command()(report)
app.command()(doctor)
app.command(name="tune")(tune_command)
app.command()(compare)

store_app = typer.Typer(help="Inspect the release store.", no_args_is_help=True)
app.add_typer(store_app, name="store")
store_app.command(name="verify")(store_verify)

app.command(name="releases")(releases_command)
app.command(name="verify")(verify_command)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    """Entry point: one place turns errors into messages and exit codes."""
    # SIGINT as SIGTERM: raised at once in the main thread. Python's default handler
    # would let asyncio.run take SIGINT over (it cancels the running task instead), and a
    # cancellation that reaches a task as it returns is lost: a Ctrl-C during a load
    # window was seen to leave the run going to the end, and exit 0.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    err = Console(stderr=True, highlight=False)
    try:
        app(args=argv, prog_name="serve-pipeline")
    except PipelineError as exc:
        for line in exc.lines():
            err.print(Text.assemble(("error: ", "bold red"), line), soft_wrap=True)
        if os.environ.get("GITHUB_ACTIONS") == "true":
            annotate(exc)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
