"""What a release manager signs, gathered from the store: this release's served config and
digests beside those of the release live in the environment it goes to (with the config's
unified diff), the git state it was built from, its approvals (signature judged against the
overlays' keys, and on which identity), and its moves across every environment.

The report renders this value (pipeline/report/release_html.py); it reads the store and
verifies nothing it has not re-checked: a blob is read through the store's verified read.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline.errors import PipelineError
from pipeline.release.chain import (
    AttestationCheck,
    approval_environment,
    check_attestation,
)
from pipeline.release.identity import verifying_issuer
from pipeline.release.manifest import Manifest, manifest_digest, read_manifest
from pipeline.release.pointers import Pointer, read_pointer
from pipeline.release.signing.approvals import (
    ApprovalRules,
    approval_keys,
    judge,
    read_approval,
)
from pipeline.release.signing.keys import TrustedKey
from pipeline.release.store.base import Store, read_verified
from pipeline.spec.models import GITHUB_OIDC_ISSUER


@dataclass(frozen=True)
class ReleaseSide:
    """One release's identifying digests and its rendered server config."""

    release_id: str
    model_sha256: str | None
    config_file: str | None
    config_sha256: str | None
    image: str | None
    config_text: str | None       # None: the config blob could not be read (see problem)
    problem: str | None = None
    artifact_sha256: str | None = None
    # What binds these bytes and figures to the run that measured them (attestation_text).
    attestation: str = ""
    attested: bool = False        # signed, and the manifest matches what was signed


@dataclass(frozen=True)
class ApprovalRow:
    environment: str
    by: str
    at: str
    key: str | None               # the trusted key that verified the signature
    identity: str                 # "github:rita (verified)" or "rita@laptop (claimed)"
    counts: bool
    reason: str | None = None
    note: str = ""


@dataclass(frozen=True)
class MoveRow:
    environment: str
    action: str
    at: str
    by: str
    previous_release_id: str | None
    approved_by: tuple[str, ...] = ()
    note: str = ""
    withdrawn: bool = False       # a rollback moved this environment away from the release


@dataclass(frozen=True)
class ReleaseDossier:
    release_id: str
    environment: str | None       # where `live` is live
    release: ReleaseSide
    live: ReleaseSide | None
    git: Mapping[str, Any] | None
    approvals: tuple[ApprovalRow, ...] = ()
    moves: tuple[MoveRow, ...] = ()
    config_diff: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def release_dossier(store: Store, name: str, release_id: str, environment: str | None,
                    approver_keys: Mapping[str, Sequence[TrustedKey]]) -> ReleaseDossier:
    """The dossier of `release_id` against what is live in `environment` (default: the
    last environment it was promoted to, else where it was verified). When the release is
    the one live there, `live` is the release it replaced."""
    manifest = read_manifest(store, name, release_id)
    pointers = _pointers(store, name)
    moves = tuple(_moves(pointers, release_id))
    promoted = [move.environment for move in moves if move.action == "promote"]
    target = environment or (promoted[-1] if promoted else manifest.verified_in)
    live_id = _live_id(pointers.get(str(target)), release_id) if target else None
    release = _side(store, release_id, manifest)
    live = _side(store, live_id, read_manifest(store, name, live_id)) if live_id else None
    diff = tuple(difflib.unified_diff(
        (live.config_text or "").splitlines() if live else [],
        (release.config_text or "").splitlines(),
        f"{live_id}/{live.config_file}" if live else "(nothing live)",
        f"{release_id}/{release.config_file}", lineterm="")) if live else ()
    return ReleaseDossier(release_id, str(target) if target else None, release, live,
                          manifest.git,
                          tuple(_approvals(store, name, release_id, manifest, approver_keys)),
                          moves, diff)


def _pointers(store: Store, name: str) -> dict[str, Pointer]:
    found = {}
    for key in store.list(f"environments/{name}/"):
        environment = key.rsplit("/", 1)[-1].removesuffix(".json")
        found[environment] = read_pointer(store, name, environment)[0]
    return found


def _live_id(pointer: Pointer | None, release_id: str) -> str | None:
    if pointer is None or pointer.current is None:
        return None
    if pointer.current != release_id:
        return pointer.current
    last = pointer.last_move_onto(release_id)
    return last.previous_release_id if last is not None and last.previous_release_id else None


def _moves(pointers: Mapping[str, Pointer], release_id: str) -> list[MoveRow]:
    rows = []
    for environment, pointer in pointers.items():
        for event in pointer.events:
            away = event.withdraws(release_id)
            if event.release_id == release_id or away:
                rows.append(MoveRow(environment, event.action.value, event.at, event.by,
                                    event.previous_release_id, event.approved_by or (),
                                    event.note or "", withdrawn=away))
    return sorted(rows, key=lambda row: row.at)


def _side(store: Store, release_id: str, manifest: Manifest) -> ReleaseSide:
    image = manifest.image or {}
    digest = manifest.config_sha256
    text, problem = None, None
    if digest is not None:
        try:
            text = read_verified(store, digest).decode("utf-8")
        except (PipelineError, UnicodeDecodeError) as error:
            problem = f"config blob {digest[:12]}: {error}"
    else:
        problem = "the manifest names no config blob"
    shown_image = image.get("reference") or image.get("digest") or image.get("id")
    check = check_attestation(store, manifest, [], "")
    return ReleaseSide(release_id, manifest.model_sha256, manifest.config_file, digest,
                       str(shown_image) if shown_image else None, text, problem,
                       manifest.artifact_sha256, attestation_text(check),
                       check.signed and not check.problems)


def attestation_text(check: AttestationCheck) -> str:
    """For the one who approves: whether anything but the store vouches for these bytes."""
    if check.problems:
        return "DOES NOT MATCH its attestation: " + "; ".join(check.problems)
    if not check.present or not check.signed:
        return ("UNSIGNED: whoever can write to the store could have rewritten these digests "
                "and figures; only a signed attestation binds them to the run")
    keyids = (check.to_json().get("creator_identities") or [])
    return ("signed (" + ", ".join(k for k in keyids if k.startswith("key:")) +
            "); promotion checks the signature against the environment's attestation.keys")


def _approvals(store: Store, name: str, release_id: str, manifest: Manifest,
               keys: Mapping[str, Sequence[TrustedKey]]) -> list[ApprovalRow]:
    digest = manifest_digest(store, name, release_id)
    creators = check_attestation(store, manifest, [], "").creators
    rows = []
    for key in approval_keys(store, name):
        data = store.read(key)
        entry = read_approval(data)
        if isinstance(entry, str) or entry.release_id != release_id:
            continue
        environment = approval_environment(key)
        rules = ApprovalRules(environment, keys.get(environment, []),
                              where=f"environments/{environment}.yaml")
        check = judge(key, data, rules, (name, release_id, digest), None, creators)
        rows.append(ApprovalRow(environment, str(entry.by), str(entry.at), check.approver,
                                _identity(entry.actor), check.counts, check.reason,
                                entry.note or ""))
    return rows


def _identity(actor: Any) -> str:
    if not isinstance(actor, Mapping):
        return "unknown"
    if actor.get("verified") and actor.get("verified_identities"):
        issuer = verifying_issuer(actor)
        by = "" if issuer == GITHUB_OIDC_ISSUER else f" by {issuer or 'unknown'}"
        return ", ".join(str(v) for v in actor["verified_identities"]) + f" (verified{by})"
    return f"{actor.get('user') or 'unknown'} (claimed, not verified)"
