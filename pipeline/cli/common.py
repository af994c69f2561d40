"""What the commands share: the console, the common options, who is acting."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from pipeline.release.identity import acting_identity, claimed_name
from pipeline.release.store.base import Store

out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 140)

SpecFile = Annotated[Path, typer.Option("--file", "-f", help="The spec (default ./serve.yaml).")]
Actor = Annotated[str | None, typer.Option("--by", help="The name to record (default: "
                                                        "$GITHUB_ACTOR in GitHub Actions, else "
                                                        "user@host). Events also record who "
                                                        "actually ran the command.")]
DEFAULT_SPEC = Path("serve.yaml")


def actor_name(by: str | None) -> str:
    return claimed_name(by, os.environ)


def acting(store: Store) -> dict[str, Any]:
    """Who runs this command (recorded in every audit event it writes)."""
    return acting_identity(dict(os.environ), store)
