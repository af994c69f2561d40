"""`serve-pipeline doctor`: the preflight checks alone, as a table or JSON, so that a runner
can be checked before its first job."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Annotated, Literal

import typer

from pipeline.cli.common import DEFAULT_SPEC, SpecFile

_STYLE = {"ok": "green", "failed": "bold red", "skipped": "dim"}


def doctor(file: SpecFile = DEFAULT_SPEC,
           env: Annotated[str | None, typer.Option(
               "--env", help="Check what `promote ENV` needs (default: what `run` "
                             "needs).")] = None,
           output: Annotated[Literal["table", "json"], typer.Option("--format")] = "table",
           ) -> None:
    """Check this machine and the store for a run of the spec; change nothing.

    Exit 0 when every check passes, else the exit code of the most serious problem
    (2 setup or spec, 3 store, 5 policy)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from pipeline.preflight import Scope, most_serious, run_checks
    from pipeline.servers.specs import load_spec
    loaded = load_spec(file, env)
    started = time.monotonic()
    checks = run_checks(loaded, dict(os.environ), Scope.for_promotion(loaded, env))
    took = time.monotonic() - started
    code = most_serious(checks)
    if output == "json":
        body = {"spec": str(loaded.path), "environment": env, "exit_code": code,
                "duration_s": round(took, 3), "checks": [c.to_json() for c in checks]}
        sys.stdout.write(json.dumps(body, indent=2) + "\n")
    else:
        table = Table(title=f"{loaded.spec.name}: preflight for "
                            f"{'promote ' + env if env else 'run'}", title_justify="left")
        for column in ("check", "status", "detail"):
            table.add_column(column)
        for check in checks:
            table.add_row(check.name, Text(check.status, style=_STYLE[check.status]),
                          Text(check.detail))
        console = Console(highlight=False, markup=False, soft_wrap=True,
                          width=None if sys.stdout.isatty() else 160)
        console.print(table)
        failed = [check for check in checks if check.status == "failed"]
        for check in failed:    # each problem whole, on one line, below the wrapped table
            console.print(Text.assemble(("✗ ", "red"), check.line()))
        console.print(f"{len(failed)} problem(s) in {took:.2f} s")
    if code:
        raise typer.Exit(code)
