"""This run against the release live in the target environment: deltas and the gate."""

from __future__ import annotations

import json
from typing import Any

from pipeline.config import RegressionStage
from pipeline.errors import StoreError, UsageError
from pipeline.release import read_manifest, read_pointer
from pipeline.report_data import Delta, compare, metrics
from pipeline.results import Gate
from pipeline.store import Store


def live_verification(store: Store, name: str, environment: str
                      ) -> tuple[str, dict[str, Any]] | None:
    """(release id, its verification record) of the release live in `environment`."""
    pointer, _ = read_pointer(store, name, environment)
    if pointer.current is None:
        return None
    try:
        manifest = read_manifest(store, name, pointer.current)
    except UsageError:
        return None
    blob = next((b for b in manifest.get("blobs", []) if b.get("role") == "verification"), None)
    if blob is None:
        return None
    try:
        body: dict[str, Any] = json.loads(store.read_blob(blob["digest"]))
    except (StoreError, ValueError):
        return None
    body.setdefault("release_id", pointer.current)
    body.setdefault("server", {"kind": manifest.get("server", {}).get("kind")})
    return pointer.current, body


def capacity_for_knee(watched: set[str], record: dict[str, Any],
                      baseline: dict[str, Any]) -> set[str]:
    """Watch the sustainable rate instead of the closed-loop knee when both runs have it."""
    knee, capacity = "saturation.knee_throughput_rps", "saturation.capacity_rps"
    if knee not in watched or not all("capacity_rps" in metrics(body, "saturation")
                                      for body in (record, baseline)):
        return watched
    return (watched - {knee}) | {capacity}


def regression_gates(record: dict[str, Any], baseline: dict[str, Any],
                     settings: RegressionStage) -> tuple[list[Gate], list[Delta]]:
    deltas = compare(record, baseline, settings.tolerance.fraction)
    watched = capacity_for_knee(set(settings.metrics), record, baseline)
    gates = []
    for delta in deltas:
        if f"{delta.stage}.{delta.metric}" not in watched or delta.worse_by is None:
            continue
        gates.append(Gate.at_most(f"regression.{delta.stage}.{delta.metric}",
                                  round(delta.worse_by * 100, 2),
                                  settings.tolerance.fraction * 100, "%"))
    return gates, deltas
