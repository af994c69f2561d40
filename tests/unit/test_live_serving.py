"""Serving the live release: its own spec from the store, and the refusals that come
before any server starts (the starts themselves: tests/integration)."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pipeline.context import RunContext
from pipeline.regression.live_serving import LiveUnservable, live_spec, serve_live
from pipeline.release.manifest_record import BlobRef, Manifest
from pipeline.release.store import open_store
from pipeline.release.store.base import Store
from pipeline.servers.specs import load_spec
from pipeline.spec.models import LoadedSpec
from pipeline.spec.stage_settings import RegressionStage
from pipeline.stage_result import Status
from stages import regression


def manifest_with(store: Store, **blobs: bytes) -> Manifest:
    refs = []
    for role, data in blobs.items():
        digest, _ = store.put_blob_bytes(data)
        refs.append(BlobRef(role, digest, len(data)))
    return Manifest(release_id="20261201T000000Z-live", blobs=tuple(refs),
                    artifact={"sha256": "0" * 64}, model={"sha256": "0" * 64},
                    config={"sha256": "0" * 64})


@pytest.fixture
def loaded(project: Path) -> LoadedSpec:
    return load_spec(project / "serve.yaml", "staging")


def test_the_live_release_is_served_with_its_own_spec(project: Path,
                                                     loaded: LoadedSpec) -> None:
    store = open_store("file://.serve-pipeline/store", project)
    own = loaded.canonical_json().replace('"instances":2', '"instances":1')
    restored = live_spec(store, manifest_with(store, spec=own.encode()), loaded)
    assert restored.spec.server.instances == 1 and loaded.spec.server.instances == 2
    assert restored.environment == "staging" and restored.workspace == loaded.workspace


@pytest.mark.parametrize("blob", [b"not json", b'{"spec": {"version": 7}}', None])
def test_an_unreadable_spec_blob_is_a_reason(project: Path, loaded: LoadedSpec,
                                            blob: bytes | None) -> None:
    store = open_store("file://.serve-pipeline/store", project)
    manifest = manifest_with(store, **({"spec": blob} if blob is not None else {}))
    with pytest.raises(LiveUnservable, match="spec blob"):
        live_spec(store, manifest, loaded)


def test_a_release_whose_blobs_fail_their_check_is_not_served(project: Path,
                                                             loaded: LoadedSpec) -> None:
    store = open_store("file://.serve-pipeline/store", project)
    manifest = manifest_with(store, spec=loaded.canonical_json().encode())
    manifest = replace(manifest, blobs=(
        *manifest.blobs, BlobRef("triton-model-repository", "1" * 64, 10)))
    with ExitStack() as resources:
        ctx = RunContext(loaded=loaded, run_id="r", run_dir=project / "run", env={},
                         resources=resources)
        with pytest.raises(LiveUnservable, match="integrity check failed: "
                                                 "triton-model-repository"):
            serve_live(ctx, store, manifest)


def test_a_release_on_another_device_is_not_served_here(project: Path,
                                                       loaded: LoadedSpec) -> None:
    store = open_store("file://.serve-pipeline/store", project)
    own = loaded.canonical_json().replace('"device":"cpu"', '"device":"gpu"')
    with ExitStack() as resources:
        ctx = RunContext(loaded=loaded, run_id="r", run_dir=project / "run", env={},
                         resources=resources)
        with pytest.raises(LiveUnservable, match="runs on gpu, this run on cpu"):
            serve_live(ctx, store, manifest_with(store, spec=own.encode()))


@pytest.mark.parametrize(("settings", "environment", "why"), [
    ({}, "staging", "the regression check is off"),
    ({"gate": True, "against": "recorded"}, "staging", "decided on the recorded run"),
    ({"gate": True}, None, "no target environment"),
])
def test_the_stage_says_why_it_does_not_run(project: Path, settings: dict[str, Any],
                                            environment: str | None, why: str) -> None:
    loaded = load_spec(project / "serve.yaml", environment)
    stages = loaded.spec.stages.model_copy(
        update={"regression": RegressionStage.model_validate(settings)})
    loaded = replace(loaded, spec=loaded.spec.model_copy(update={"stages": stages}))
    with ExitStack() as resources:
        ctx = RunContext(loaded=loaded, run_id="r", run_dir=project / "run", env={},
                         resources=resources)
        result = regression.run(ctx)
    assert result.status is Status.SKIPPED and why in result.message
