"""The chain a release must hold before its bytes leave the store to be served.

`materialize`, `export` and `serve` hand a release to a server, a cluster or this host.
Checking its blobs against its manifest is not enough: whoever can write to the store can
rewrite the manifest too. So, as promotion does (pipeline.release.chain), a release is
deployed only when its manifest is the one its attestation covers (subjects, gates, stage
results, name and id), signed by a key the environment trusts when its
`attestation.keys` names any (and signed at all when `attestation.required`), and, when
it is taken from an environment, the very manifest whose digest the pointer's move onto
it recorded.
"""

from __future__ import annotations

from collections.abc import Callable

from pipeline.errors import PolicyError, StoreError
from pipeline.release.chain import check_attestation, policy_problems, trusted_keys
from pipeline.release.configured import overlay_file
from pipeline.release.manifest import manifest_digest, read_manifest
from pipeline.release.manifest_record import Manifest
from pipeline.release.pointers import (
    Pointer,
    check_manifest_unchanged,
    read_checked_pointer,
    read_pointer,
    unrecorded,
)
from pipeline.release.resolve import resolve_release
from pipeline.release.store.base import Store
from pipeline.spec.models import LoadedSpec


def deployable_release(store: Store, loaded: LoadedSpec, target: str,
                       overlay: Callable[[str], LoadedSpec | None] | None = None) -> Manifest:
    """The manifest of release or environment `target` (pipeline.release.resolve), once
    its chain holds; StoreError (rewritten evidence) or PolicyError (not enough of it).

    Named by id, a release is held to every environment whose pointer ever took it: the
    manifest each recorded, and the trust rules of each one's overlay (`overlay(env)`, the
    spec with that environment's overlay, None where there is none): a release id is no
    way around production's."""
    manifest = resolve_release(store, loaded.spec.name, target)
    if manifest.release_id == target:
        held = False
        for environment in environments_of(store, loaded.spec.name):
            pointer, _ = read_pointer(store, loaded.spec.name, environment)
            if not any(event.release_id == target for event in pointer.events):
                continue
            held = True
            overlaid = overlay(environment) if overlay is not None else None
            check_deployable(store, overlaid or loaded, manifest, pointer)
        return manifest if held else check_deployable(store, loaded, manifest, None)
    pointer = read_checked_pointer(store, loaded.spec.name, target)
    if pointer.current != manifest.release_id:      # moved since it was resolved
        raise StoreError(f"{target} moved to {pointer.current} while {manifest.release_id} "
                         "was being checked; run the command again")
    return check_deployable(store, loaded, manifest, pointer)


def environments_of(store: Store, name: str) -> list[str]:
    """The environments with a pointer for `name` in the store."""
    prefix = f"environments/{name}/"
    return sorted(key.removeprefix(prefix).removesuffix(".json") for key in store.list(prefix)
                  if key.endswith(".json") and "/" not in key.removeprefix(prefix))


def deployable_in(store: Store, loaded: LoadedSpec, environment: str,
                  release_id: str) -> Manifest:
    """Release `release_id`, which environment `environment`'s pointer is on, checked."""
    manifest = read_manifest(store, loaded.spec.name, release_id)
    pointer = read_checked_pointer(store, loaded.spec.name, environment)
    if pointer.current != release_id:
        raise StoreError(f"{environment} points at {pointer.current}, not {release_id}")
    return check_deployable(store, loaded, manifest, pointer)


def check_deployable(store: Store, loaded: LoadedSpec, manifest: Manifest,
                     pointer: Pointer | None) -> Manifest:
    release_id = manifest.release_id
    if manifest.name != loaded.spec.name:
        raise PolicyError(f"release {release_id} is of {manifest.name!r}, not "
                          f"{loaded.spec.name!r} ({loaded.path.name}: name)")
    if pointer is not None:
        check_manifest_unchanged(pointer, release_id,
                                 manifest_digest(store, loaded.spec.name, release_id))
        # Taken from an environment only by a move the audit log records.
        if pointer.last_move_onto(release_id) is None:
            raise StoreError(f"release {release_id} is not deployed: no move of "
                             f"{pointer.environment} onto it is recorded")
        for event in pointer.events:
            reason = unrecorded(store, loaded.spec.name, pointer.environment,
                                event) if event.release_id == release_id else None
            if reason is not None:
                raise StoreError(f"release {release_id} is not deployed: {reason}")
    where = (f"{overlay_file(loaded.environment)} attestation.keys"
             if loaded.environment else "attestation.keys")
    keys = trusted_keys(loaded.policy.attestation.keys, loaded, where)
    attestation = check_attestation(store, manifest, keys, where)
    if attestation.problems:
        raise StoreError(f"release {release_id} is not deployed: "
                         + "; ".join(attestation.problems))
    refused = policy_problems(attestation, loaded.policy.attestation.required, keys,
                              release_id, overlay_file(loaded.environment or "")
                              if loaded.environment else "the spec's")
    if refused:
        raise PolicyError(refused[0])
    return manifest
