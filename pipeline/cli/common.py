"""What the commands share: the console, the common options, who is acting."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from pipeline.release.pointers import Moved
    from pipeline.release.store.base import Store


@functools.cache
def out() -> Console:
    """The commands' console on stdout, made when a command first prints: `--help` does
    not load Rich."""
    from rich.console import Console

    return Console(highlight=False, markup=False, soft_wrap=True,
                   width=None if sys.stdout.isatty() else 140)

SpecFile = Annotated[Path, typer.Option("--file", "-f", help="The spec (default ./serve.yaml).")]
Actor = Annotated[str | None, typer.Option("--by", help="The name to record (default: "
                                                        "$GITHUB_ACTOR in GitHub Actions, else "
                                                        "user@host). Events also record who "
                                                        "actually ran the command.")]
DEFAULT_SPEC = Path("serve.yaml")


def actor_name(by: str | None) -> str:
    from pipeline.release.identity import claimed_name
    return claimed_name(by, os.environ)


def acting(store: Store, with_token: bool = False) -> dict[str, Any]:
    """Who runs this command (recorded in every audit event it writes); `with_token`: with
    the OIDC token that proves it (an approval carries it)."""
    from pipeline.release.identity import acting_identity
    return acting_identity(dict(os.environ), store, with_token)


def print_move(environment: str, moved: Moved) -> None:
    """A pointer move that happened: the move on stdout, what went wrong after it (the
    audit entry) as warnings on stderr; the command still succeeds."""
    from pipeline.release.pointer_event import PointerAction
    event = moved.event
    change = f"{environment}: {event.previous_release_id or 'nothing'} → {event.release_id}"
    if event.action is PointerAction.ROLLBACK:
        out().print(f"{change} (rollback by {event.by})")
    else:
        approvers = ", ".join(event.approved_by or ()) or "not required"
        out().print(f"{change} (by {event.by}; approved: {approvers})")
        out().print(f"release {event.release_id}")
    from rich.console import Console

    warn = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)
    for warning in moved.warnings:
        warn.print(f"warning: {warning}")
