"""`ENV|RELEASE` on the command line: a release id, or the release an environment's pointer
is on."""

from __future__ import annotations

import re

from pipeline.errors import UsageError
from pipeline.release.manifest import read_manifest
from pipeline.release.manifest_record import Manifest
from pipeline.release.pointers import read_pointer
from pipeline.release.store.base import Store

# What new_release_id (pipeline.release.manifest) makes: 20261130T120000Z-91e4424b.
RELEASE_ID = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{8}$")
ENVIRONMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def is_release_id(target: str) -> bool:
    return RELEASE_ID.match(target) is not None


def resolve_release(store: Store, name: str, target: str) -> Manifest:
    """The manifest of release `target`, or of the release live in environment `target`;
    UsageError naming what and where when there is none."""
    if is_release_id(target):
        return read_manifest(store, name, target)
    if not ENVIRONMENT.match(target):
        raise UsageError(f"{target!r} is neither a release id nor an environment name")
    pointer, _ = read_pointer(store, name, target)
    if pointer.current is None:
        raise UsageError(f"environment {target} of '{name}' has no live release in {store.url}")
    return read_manifest(store, name, pointer.current)
