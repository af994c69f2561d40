"""Room on disk for what a run writes: the run folder (model copy, artifact, its tar, the
served copy) and a local store (the release's blobs)."""

from __future__ import annotations

import shutil
from pathlib import Path

from pipeline.preflight.checks import Check
from pipeline.preflight.scope import Scope
from pipeline.record import runs_dir
from pipeline.spec.models import LoadedSpec

# Copies of the model a run makes (source copy, repository or .mar, its tar, the served
# copy, the store blob) and room for logs, configs and records.
COPIES = 5
HEADROOM = 256 * 2**20


def disk_checks(loaded: LoadedSpec, scope: Scope) -> list[Check]:
    needed = COPIES * _model_bytes(loaded) + HEADROOM
    folders = [runs_dir(loaded.workspace)] if scope.starts_server else []
    store = loaded.spec.publish.store
    if scope.publishes and store.startswith("file://"):
        location = Path(store.removeprefix("file://"))
        folders.append(location if location.is_absolute() else loaded.workspace / location)
    if not folders:
        return [Check.skipped("disk", "nothing is written locally")]
    checks = []
    devices: set[int] = set()
    for folder in folders:
        existing = folder
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if existing.stat().st_dev in devices:   # one file system: the copies counted once
            continue
        devices.add(existing.stat().st_dev)
        free = shutil.disk_usage(existing).free
        detail = f"{existing}: {free / 2**30:.1f} GiB free, about {needed / 2**30:.2f} GiB needed"
        checks.append(Check.ok("disk", detail) if free >= needed else
                      Check.failed("disk", detail + ": free some space or move the workspace"))
    return checks


def _model_bytes(loaded: LoadedSpec) -> int:
    """The model's size where it is local; a DVC source counts as the headroom alone."""
    path = loaded.spec.model.source.path
    if path is None:
        return 0
    try:
        return loaded.resolve(path).stat().st_size
    except OSError:
        return 0
