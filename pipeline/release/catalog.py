"""The releases of one spec in a store, oldest first, with where each is current."""

from __future__ import annotations

from typing import Any

from pipeline.release.manifest import list_releases, read_manifest
from pipeline.release.pointers import read_pointer
from pipeline.release.store.base import Store


def release_rows(store: Store, name: str) -> list[dict[str, Any]]:
    """One row per release of `name`: who made it, where it was verified, its gates, and
    the environments whose pointer is on it."""
    current: dict[str, list[str]] = {}
    for key in store.list(f"environments/{name}/"):
        environment = key.rsplit("/", 1)[-1].removesuffix(".json")
        pointer, _ = read_pointer(store, name, environment)
        if pointer.current:
            current.setdefault(pointer.current, []).append(environment)
    rows: list[dict[str, Any]] = []
    for release_id in list_releases(store, name):
        manifest = read_manifest(store, name, release_id)
        gates = manifest.gates
        rows.append({"release_id": release_id, "created_at": manifest.created_at,
                     "created_by": manifest.created_by, "verified_in": manifest.verified_in,
                     "model_sha256": manifest.model_sha256,
                     "config_sha256": manifest.config_sha256,
                     "gates_passed": sum(1 for g in gates if g.get("passed")),
                     "gates": len(gates), "current_in": sorted(current.get(release_id, []))})
    return rows
