"""A local store whose production environment needs staging and a second person's approval,
and releases staged in it."""

from __future__ import annotations

from pathlib import Path

from pipeline.digest import sha256_bytes
from pipeline.release.manifest import BlobSource, publish_release, utc_now
from pipeline.release.pointers import move_pointer
from pipeline.release.store import open_store
from pipeline.release.store.local import LocalStore
from tests.support.recorded import recorded

NAME = "fraud-mlp"
POLICY = "requires: [staging]\napproval: {required: true, distinct_from_creator: true}\n"


def policy_store(project: Path) -> LocalStore:
    """The project's local store, with production requiring staging and a second person's
    approval."""
    (project / "environments" / "production.yaml").write_text(POLICY)
    opened = open_store("file://.serve-pipeline/store", project)
    assert isinstance(opened, LocalStore)
    return opened


def staged(store: LocalStore, payload: bytes, creator: str = "alice") -> str:
    source = BlobSource("model", None, payload, sha256_bytes(payload))
    body = {"run_id": "r", "created_by": creator,
            "created_by_actor": {"user": f"{creator}@build-host", "via": "local"},
            **recorded()}
    release = publish_release(store, NAME, [source], body, utc_now()).release_id
    move_pointer(store, NAME, "staging", release, "promote", "ci")
    return release


def audit(store: LocalStore) -> list[str]:
    return store.list(f"audit/{NAME}/")
