"""`doctor --env ENV` for an environment that takes its release from another: the checks of
the promotion policy (pipeline.release.policy) that `promote ENV` would apply, each run on
its own, read-only, so that every refusal shows at once, each on one line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline.errors import PipelineError, UsageError
from pipeline.preflight.checks import Check
from pipeline.release.manifest import read_manifest
from pipeline.release.pointers import read_pointer
from pipeline.release.policy import (
    check_approval,
    check_belongs,
    check_gates,
    check_intact,
    check_requires,
)
from pipeline.release.store.base import Store
from pipeline.spec.models import LoadedSpec

NAME = "policy"


def promotion_checks(store: Store, loaded: LoadedSpec, environment: str,
                     release_id: str) -> list[Check]:
    """One check per policy step for promoting `release_id` into `environment`; a step that
    refuses fails with the message and exit kind `promote` would end with."""
    name = loaded.spec.name
    try:
        manifest = read_manifest(store, name, release_id)
    except PipelineError as error:
        return [Check.failed(f"{NAME}.release", str(error), error.exit_code)]

    def belongs() -> str:
        check_belongs(store, loaded, release_id, manifest)
        return f"release {release_id} was published from {name}"

    def target() -> str:
        pointer, _ = read_pointer(store, name, environment)
        if pointer.current == release_id:
            raise UsageError(f"{environment} already points at {release_id}")
        return f"{environment} points at {pointer.current or 'nothing yet'}"

    def blobs() -> str:
        check_intact(store, release_id, manifest, "promoted")
        return f"{len(manifest.blobs)} blobs intact"

    def gates() -> str:
        checked, notes = check_gates(loaded, environment, release_id, manifest)
        return "; ".join([checked, *notes])

    def approval() -> str:
        approvers = check_approval(store, loaded, environment, release_id, None)
        if approvers:
            return "approved by " + ", ".join(approvers)
        return "attestation checked; no approval required"

    steps: list[tuple[str, Callable[[], str]]] = [
        ("spec", belongs), ("target", target), ("blobs", blobs),
        ("requires", lambda: check_requires(store, loaded, environment, release_id)
         or "requires no other environment"),
        ("gates", gates), ("approval", approval)]
    return [_step(f"{NAME}.{step}", run) for step, run in steps]


def _step(name: str, run: Callable[[], Any]) -> Check:
    try:
        return Check.ok(name, str(run()))
    except PipelineError as error:
        return Check.failed(name, str(error), error.exit_code)
