"""The command line: thin Typer commands over the core; errors and exit codes in one place.

The commands live in modules by concern (spec, run, release, report); this module puts them
on one Typer app, in the order `--help` lists them.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pipeline import __version__, interrupts
from pipeline.cli.canary_commands import JudgeCommand, judge_command
from pipeline.cli.compare import compare
from pipeline.cli.deploy_commands import (
    export_app,
    export_argo_command,
    export_kserve_command,
    materialize_command,
    serve_command,
)
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
from pipeline.errors import PipelineError, UsageError

if TYPE_CHECKING:
    from rich.console import Console

# Help in Click's plain format (rich_markup_mode=None): Typer's Rich help loads Rich's
# console, markdown, syntax and traceback modules, which took 40% of `--help`.
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None,
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


def summary(command: Callable[..., Any]) -> str:
    """The first paragraph of a command's docstring, for the command list: Click's own
    list cuts it to the terminal's width and ends it with "..."."""
    return " ".join(inspect.cleandoc(command.__doc__ or "").split("\n\n")[0].split())


def add_command(group: typer.Typer, command: Callable[..., Any], name: str | None = None) -> None:
    group.command(name=name, short_help=summary(command))(command)


add_command(app, validate)
add_command(app, schema)
add_command(app, promote)
add_command(app, approve_command, "approve")
add_command(app, run_command, "run")
add_command(app, measure)
# Its own command class: arguments that do not parse exit 4 (2 is its inconclusive).
app.command(name="judge", short_help=summary(judge_command), cls=JudgeCommand)(judge_command)
add_command(app, rollback_command, "rollback")
add_command(app, history)
add_command(app, report)
add_command(app, doctor)
add_command(app, tune_command, "tune")
add_command(app, compare)

store_app = typer.Typer(help="Inspect the release store.", no_args_is_help=True,
                        rich_markup_mode=None)
app.add_typer(store_app, name="store")
add_command(store_app, store_verify, "verify")

add_command(app, releases_command, "releases")
add_command(app, verify_command, "verify")
add_command(app, materialize_command, "materialize")
app.add_typer(export_app, name="export")
add_command(export_app, export_kserve_command, "kserve")
add_command(app, serve_command, "serve")
add_command(export_app, export_argo_command, "argo")


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C or SIGTERM. Inside an event loop (a load window) the flag alone is set: the
    load's watchdog stops it within 0.1 s and raises KeyboardInterrupt outside the loop
    (pipeline.measure.windows). Raised inside the loop it could land in asyncio's own
    bookkeeping (a future whose result was being set) and leave asyncio.run waiting
    forever as it closed. Anywhere else, or at a second signal, it is raised at once."""
    again = interrupts.requested()
    interrupts.request()      # kept even where the exception below is swallowed
    if not again:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            return
    raise KeyboardInterrupt


def _require_working_folder() -> None:
    """Every command resolves paths against the working folder; one that was removed
    under the shell (a deleted checkout) is named here, not as a traceback from pathlib."""
    try:
        os.getcwd()
    except FileNotFoundError:
        pwd = os.environ.get("PWD") or "the working folder"
        raise UsageError(f"{pwd}: the working folder no longer exists (it was removed or "
                         "replaced): cd into an existing folder and run again") from None


def main(argv: list[str] | None = None) -> None:
    """Entry point: one place turns errors into messages and exit codes."""
    # SIGINT as SIGTERM: raised at once in the main thread. Python's default handler
    # would let asyncio.run take SIGINT over (it cancels the running task instead), and a
    # cancellation that reaches a task as it returns is lost: a Ctrl-C during a load
    # window was seen to leave the run going to the end, and exit 0.
    interrupts.clear()
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    try:
        _require_working_folder()
        app(args=argv, prog_name="serve-pipeline")
    except PipelineError as exc:
        from rich.text import Text

        err = _stderr()
        for line in exc.lines():
            err.print(Text.assemble(("error: ", "bold red"), line), soft_wrap=True)
        if os.environ.get("GITHUB_ACTIONS") == "true":
            annotate(exc)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _stderr().print("interrupted")
        sys.exit(130)


def _stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, markup=False)
