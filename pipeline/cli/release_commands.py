"""`approve`, `rollback`, `history`, `releases` and `store verify`: releases in the store."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Literal

import typer
from rich.text import Text

from pipeline.cli.common import (
    DEFAULT_SPEC,
    Actor,
    SpecFile,
    acting,
    actor_name,
    out,
    print_move,
)
from pipeline.cli.records import find_record
from pipeline.errors import UsageError
from pipeline.release.catalog import release_rows
from pipeline.release.manifest import read_manifest
from pipeline.release.pointers import read_pointer
from pipeline.release.policy import promotion_needs, rollback
from pipeline.release.promotion import approve, counted_approvers, creator_names
from pipeline.release.store import store_for
from pipeline.release.verify import verify_store
from pipeline.report.terminal import render_terminal
from pipeline.spec.loading import load_spec


def approve_command(release_id: str, file: SpecFile = DEFAULT_SPEC,
                    env: Annotated[str, typer.Option(
                        "--env", help="The environment the approval is for.")] = "production",
                    by: Actor = None,
                    note: Annotated[str, typer.Option("--note")] = "",
                    yes: Annotated[bool, typer.Option(
                        "--yes", help="Do not ask (scripts, CI).")] = False) -> None:
    """Show RELEASE_ID's verification report and record an approval for an environment."""
    loaded = load_spec(file, env)
    store = store_for(loaded)
    approver = actor_name(by)
    manifest = read_manifest(store, loaded.spec.name, release_id)
    counted_approvers(loaded, env, f"release {release_id}", creator_names(manifest), [approver])
    out.print(render_terminal(find_record(loaded, release_id)))
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError("approve asks for confirmation; pass --yes when not at a terminal")
        if not typer.confirm(f"Approve release {release_id} for {env}?"):
            raise UsageError("not approved")
    entry = approve(store, loaded.spec.name, release_id, env, approver, note,
                    actor=acting(store))
    out.print(f"approved {release_id} for {env} by {entry['by']} at {entry['at']}")


def rollback_command(environment: str, file: SpecFile = DEFAULT_SPEC,
                     to: Annotated[str | None, typer.Option("--to", help="Release id (default: "
                                                            "the one before).")] = None,
                     by: Actor = None) -> None:
    """Point ENVIRONMENT back at a release that was live there and not withdrawn.

    Anything else (a release never live there, or one a rollback moved away from) is
    refused: promote it instead, through every check of the environment's policy."""
    loaded = load_spec(file, environment)
    store = store_for(loaded)
    moved = rollback(store, loaded.spec.name, environment, to, actor_name(by),
                     actor=acting(store), needs=promotion_needs(loaded, environment))
    print_move(environment, moved)


def history(environment: str, file: SpecFile = DEFAULT_SPEC,
            output: Annotated[Literal["table", "json"], typer.Option("--format")] = "table",
            ) -> None:
    """What happened to ENVIRONMENT: every promote and rollback, newest last."""
    loaded = load_spec(file, environment)
    store = store_for(loaded)
    pointer, _ = read_pointer(store, loaded.spec.name, environment)
    if output == "json":
        body = {"environment": environment, "current": pointer.current,
                "events": pointer.events}
        sys.stdout.write(json.dumps(body, indent=2) + "\n")
        return
    from rich.table import Table

    table = Table(title=f"{loaded.spec.name} / {environment}: current {pointer.current or '-'}",
                  title_justify="left")
    for column in ("at", "action", "release", "previous", "by", "run by", "approved by"):
        table.add_column(column)
    for event in pointer.events:
        table.add_row(event["at"], event["action"], event["release_id"],
                      event.get("previous_release_id") or "-", event["by"],
                      str((event.get("actor") or {}).get("user") or "-"),
                      ", ".join(event.get("approved_by") or []) or "-")
    out.print(table)


def store_verify(file: SpecFile = DEFAULT_SPEC,
                 env: Annotated[str | None, typer.Option("--env")] = None,
                 output: Annotated[Literal["table", "json"], typer.Option("--format")] = "table",
                 repair: Annotated[bool, typer.Option(
                     "--repair", help="Write the audit entries missing for moves the pointers' "
                     "history shows (after a store failure right after a swap).")] = False,
                 ) -> None:
    """Check every manifest's blobs (digests), every pointer and its audit entries;
    read-only unless --repair."""
    loaded = load_spec(file, env)
    store = store_for(loaded)
    check = verify_store(store, repair=repair)
    if output == "json":
        sys.stdout.write(json.dumps(check.to_json(), indent=2) + "\n")
    else:
        for problem in check.problems:
            out.print(Text.assemble(("✗ ", "red"), problem))
        for repaired in check.repaired:
            out.print(Text.assemble(("✓ ", "green"), repaired))
        out.print(f"{store.url}: {check.manifests} manifests, {check.blobs} blobs, "
                  f"{check.pointers} pointers checked; {len(check.problems)} problems")
    if check.problems:
        raise typer.Exit(1)


def releases_command(file: SpecFile = DEFAULT_SPEC,
                     output: Annotated[Literal["table", "json"], typer.Option("--format")] =
                     "table") -> None:
    """The spec's releases in the store, oldest first, with where each is current."""
    loaded = load_spec(file, None)
    store = store_for(loaded)
    name = loaded.spec.name
    rows = release_rows(store, name)
    if output == "json":
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    from rich.table import Table

    table = Table(title=f"{name} releases in {store.url}", title_justify="left")
    for column in ("release", "created", "by", "verified in", "gates", "current in"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["release_id"], str(row["created_at"]), str(row["created_by"]),
                      str(row["verified_in"] or "-"), f"{row['gates_passed']}/{row['gates']}",
                      ", ".join(row["current_in"]) or "-")
    out.print(table)
