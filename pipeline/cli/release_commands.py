"""`approve`, `rollback`, `history`, `releases`, `verify` and `store verify`: releases in the
store."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from pipeline.cli.common import (
    DEFAULT_SPEC,
    Actor,
    SpecFile,
    acting,
    actor_name,
    out,
    print_move,
)
from pipeline.errors import UsageError

if TYPE_CHECKING:
    from pipeline.release.signing.approvals import ApprovalRules
    from pipeline.spec.models import LoadedSpec


def approve_command(release_id: str, file: SpecFile = DEFAULT_SPEC,
                    env: Annotated[str, typer.Option(
                        "--env", help="The environment the approval is for.")] = "production",
                    key: Annotated[Path | None, typer.Option(
                        "--key", help="The approver's private key (PEM, Ed25519 or ECDSA "
                        "P-256); default $SERVE_PIPELINE_APPROVAL_KEY.")] = None,
                    by: Actor = None,
                    note: Annotated[str, typer.Option("--note")] = "",
                    yes: Annotated[bool, typer.Option(
                        "--yes", help="Do not ask (scripts, CI).")] = False) -> None:
    """Show RELEASE_ID's verification report and sign an approval of it for an environment:
    a statement over its manifest's digest and the environment, signed with --key."""
    from pipeline.cli.records import find_record, release_evidence
    from pipeline.release.approve import approve_release
    from pipeline.release.signing.keys import APPROVAL_KEY_ENV, FileSigner
    from pipeline.release.store import store_for
    from pipeline.report.release_terminal import release_terminal
    from pipeline.report.terminal import render_terminal
    from pipeline.servers.specs import load_spec
    loaded = load_spec(file, env)
    store = store_for(loaded)
    key_path = key or (Path(os.environ[APPROVAL_KEY_ENV]) if os.environ.get(APPROVAL_KEY_ENV)
                       else None)
    if key_path is None:
        raise UsageError(f"approvals are signed: pass --key PATH (or set {APPROVAL_KEY_ENV})")
    signer = FileSigner.from_file(key_path)
    identity = acting(store, with_token=True)
    out().print(render_terminal(find_record(loaded, release_id)))
    out().print(release_terminal(release_evidence(loaded, release_id, env) or "no release"))
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError("approve asks for confirmation; pass --yes when not at a terminal")
        if not typer.confirm(f"Approve release {release_id} for {env}?"):
            raise UsageError("not approved")
    entry = approve_release(store, loaded, release_id, env, signer, actor_name(by), identity,
                            note)
    verified = "verified" if identity.get("verified") else "unverified"
    out().print(f"approved {release_id} for {env} by {entry.by} ({verified} identity) at "
               f"{entry.at}, signed with {signer.keyid[:19]}")


def rollback_command(environment: str, file: SpecFile = DEFAULT_SPEC,
                     to: Annotated[str | None, typer.Option("--to", help="Release id (default: "
                                                            "the one before).")] = None,
                     by: Actor = None,
                     note: Annotated[str, typer.Option(
                         "--note", help="Why: kept with the event (history shows it).")] = "",
                     ) -> None:
    """Point ENVIRONMENT back at a release that was live there and not withdrawn.

    Anything else (a release never live there, or one a rollback moved away from) is
    refused: promote it instead, through every check of the environment's policy."""
    from pipeline.release.policy import promotion_needs, rollback
    from pipeline.release.store import store_for
    from pipeline.servers.specs import load_spec
    loaded = load_spec(file, environment)
    store = store_for(loaded)
    moved = rollback(store, loaded.spec.name, environment, to, actor_name(by),
                     actor=acting(store), needs=promotion_needs(loaded, environment),
                     note=note)
    print_move(environment, moved)


def history(environment: str, file: SpecFile = DEFAULT_SPEC,
            output: Annotated[Literal["table", "json"], typer.Option("--format")] = "table",
            ) -> None:
    """What happened to ENVIRONMENT: every promote and rollback, newest last."""
    from pipeline.release.pointers import read_pointer
    from pipeline.release.store import store_for
    from pipeline.servers.specs import load_spec
    loaded = load_spec(file, environment)
    store = store_for(loaded, create=False)
    pointer, _ = read_pointer(store, loaded.spec.name, environment)
    if output == "json":
        body = {"environment": environment, "current": pointer.current,
                "events": [event.to_json() for event in pointer.events]}
        sys.stdout.write(json.dumps(body, indent=2) + "\n")
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"{loaded.spec.name} / {environment}: current {pointer.current or '-'}",
                  title_justify="left")
    # `by` is a name someone typed; `run by` says whether anything checked who ran it.
    for column in ("at", "action", "release", "previous", "by (typed)", "run by",
                   "approved by", "note"):
        table.add_column(column)
    for event in pointer.events:
        actor = event.actor or {}
        ran = "-" if not actor.get("user") else (
            f"{actor['user']} ({'verified' if actor.get('verified') else 'claimed'})")
        table.add_row(event.at, event.action.value, event.release_id,
                      event.previous_release_id or "-", event.by, ran,
                      ", ".join(event.approved_by or ()) or "-", Text(event.note or "-"))
    out().print(table)


def store_verify(file: SpecFile = DEFAULT_SPEC,
                 env: Annotated[str | None, typer.Option("--env")] = None,
                 output: Annotated[Literal["table", "json"], typer.Option("--format")] = "table",
                 repair: Annotated[bool, typer.Option(
                     "--repair", help="Write the audit entries missing for moves the pointers' "
                     "history shows (after a store failure right after a swap), and remove "
                     "what interrupted writers left over an hour ago (temp files, incomplete "
                     "S3 uploads).")] = False,
                 ) -> None:
    """Check every manifest's blobs (digests), every pointer and its audit entries;
    read-only unless --repair."""
    from rich.text import Text

    from pipeline.release.chain import unapproved_promotion, unsigned_approvals
    from pipeline.release.offline import approver_keys_by_environment
    from pipeline.release.pointer_event import PointerEvent
    from pipeline.release.store import store_for
    from pipeline.release.store.local import LocalStore
    from pipeline.release.verify import verify_store
    from pipeline.servers.specs import load_spec
    loaded = load_spec(file, env)
    store = store_for(loaded, create=repair)
    rules, unreadable = approval_required(file, loaded)

    def unapproved(name: str, environment: str, event: PointerEvent,
                   earlier: list[PointerEvent]) -> str | None:
        ruled = rules.get(environment) if name == loaded.spec.name else None
        return None if ruled is None else unapproved_promotion(store, name, event, earlier,
                                                               ruled)

    check = verify_store(store, repair=repair, unapproved=unapproved)
    check.problems += unreadable
    if isinstance(store, LocalStore) and not store.root.is_dir():   # new, or a typo
        check.notes.append(f"no store at {store.root}: nothing was ever published there "
                           f"({file.name}: publish.store)")
    keys = approver_keys_by_environment(loaded)
    check.problems += unsigned_approvals(store, lambda environment: keys.get(environment, []))
    if output == "json":
        sys.stdout.write(json.dumps(check.to_json(), indent=2) + "\n")
    else:
        for problem in check.problems:
            out().print(Text.assemble(("✗ ", "red"), problem))
        for repaired in check.repaired:
            out().print(Text.assemble(("✓ ", "green"), repaired))
        for note in [*check.notes, *check.leftovers]:
            out().print(Text.assemble(("· ", "yellow"), note))
        out().print(f"{store.url}: {check.manifests} manifests, {check.blobs} blobs, "
                  f"{check.pointers} pointers checked; {len(check.problems)} problems"
                  + (f", {len(check.leftovers)} leftovers" if check.leftovers else ""))
    if check.problems:
        raise typer.Exit(1)


def approval_required(file: Path, loaded: LoadedSpec
                      ) -> tuple[dict[str, ApprovalRules], list[str]]:
    """The approval rules of each environment next to the spec whose overlay requires
    approval, and a problem for each overlay that cannot be read (its moves unchecked)."""
    from pipeline.errors import PipelineError
    from pipeline.release.chain import approval_rules
    from pipeline.servers.specs import load_spec
    from pipeline.spec.loading import environment_names
    found, problems = {}, []
    for environment in environment_names(loaded.workspace):
        try:
            overlaid = load_spec(file, environment)
            if overlaid.policy.approval.required:
                found[environment] = approval_rules(overlaid, environment)
        except PipelineError as exc:
            first = (str(exc).splitlines() or [""])[0]
            problems.append(f"environments/{environment}.yaml cannot be read, so its moves "
                            f"were not checked for approvals: {first}")
    return found, problems


def releases_command(file: SpecFile = DEFAULT_SPEC,
                     output: Annotated[Literal["table", "json"], typer.Option("--format")] =
                     "table") -> None:
    """The spec's releases in the store, oldest first, with where each is current."""
    from pipeline.release.catalog import release_rows
    from pipeline.release.store import store_for
    from pipeline.servers.specs import load_spec
    loaded = load_spec(file, None)
    store = store_for(loaded, create=False)
    name = loaded.spec.name
    rows = release_rows(store, name)
    if output == "json":
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    from rich.table import Table

    table = Table(title=f"{name} releases in {store.url}", title_justify="left")
    for column in ("release", "created", "by", "verified in", "model", "config", "gates",
                   "current in"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["release_id"], str(row["created_at"]), str(row["created_by"]),
                      str(row["verified_in"] or "-"), _digest(row["model_sha256"]),
                      _digest(row["config_sha256"]), f"{row['gates_passed']}/{row['gates']}",
                      ", ".join(row["current_in"]) or "-")
    out().print(table)


def _digest(value: object) -> str:
    """The first 12 hex digits (as `verify` and the store's messages show digests)."""
    return f"sha256:{str(value)[:12]}" if value else "-"


def verify_command(release_id: str, file: SpecFile = DEFAULT_SPEC,
                   store_url: Annotated[str | None, typer.Option(
                       "--store", help="The store (default: the spec's); a copied directory "
                       "as file:///path works.")] = None,
                   public_key: Annotated[list[Path] | None, typer.Option(
                       "--public-key", help="A trusted public key (PEM), for the "
                       "attestation and approvals; repeatable.")] = None,
                   env: Annotated[str | None, typer.Option(
                       "--env", help="Only this overlay's keys (default: every overlay's).")
                   ] = None,
                   output: Annotated[Literal["table", "json"], typer.Option("--format")] =
                   "table") -> None:
    """Verify RELEASE_ID offline: every blob re-hashed, the signed attestation over them,
    and every approval's signature and binding, with public keys only."""
    from rich.text import Text

    from pipeline.release.chain import approval_environment
    from pipeline.release.offline import verify_release_offline
    store, chain = verify_release_offline(file, release_id, store_url, public_key or [], env)
    if output == "json":
        sys.stdout.write(json.dumps(chain.to_json(), indent=2) + "\n")
    else:
        for problem in chain.problems:
            out().print(Text.assemble(("✗ ", "red"), problem))
        signer = chain.attestation.signer or "-"
        counted = ", ".join(f"{a.approver} ({approval_environment(a.key)})"
                            for a in chain.approvals if a.counts) or "none"
        out().print(f"{store.url} release {release_id}: manifest sha256 "
                  f"{chain.manifest_sha256[:12]}, attestation signed by {signer}, approvals: "
                  f"{counted}; {len(chain.problems)} problems")
    if chain.problems:
        raise typer.Exit(1)
