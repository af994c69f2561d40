"""The live release started ahead of the regression stage: when it is, what a start it
cannot make leaves for the stage, and the wait before the first measured window (the
start itself, on real servers: tests/integration/test_side_by_side_regression.py)."""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pipeline.context import RunContext
from pipeline.digest import sha256_bytes
from pipeline.regression.head_start import HeadStart, begin
from pipeline.regression.live_serving import LiveUnservable
from pipeline.release.manifest import BlobSource, publish_release, utc_now
from pipeline.release.manifest_record import Manifest
from pipeline.release.pointer_event import PointerAction
from pipeline.release.pointers import move_pointer
from pipeline.release.store import open_store
from pipeline.servers.specs import load_spec
from pipeline.spec.models import LoadedSpec
from pipeline.spec.stage_settings import RegressionStage


def with_check(loaded: LoadedSpec, **settings: Any) -> LoadedSpec:
    stages = loaded.spec.stages.model_copy(
        update={"regression": RegressionStage.model_validate(settings)})
    return replace(loaded, spec=loaded.spec.model_copy(update={"stages": stages}))


def publish_live(project: Path, loaded: LoadedSpec, spec_json: str) -> str:
    """A release live in staging, its spec blob `spec_json`: its id."""
    store = open_store(loaded.spec.publish.store, project)
    verification = json.dumps({"stages": []}).encode()
    release_id = publish_release(store, loaded.spec.name, [
        BlobSource("verification", None, verification, sha256_bytes(verification)),
        BlobSource("spec", None, spec_json.encode(), sha256_bytes(spec_json.encode()))],
        Manifest.from_json({"run_id": "r"}), utc_now()).release_id
    move_pointer(store, loaded.spec.name, "staging", release_id, PointerAction.PROMOTE,
                 "tester")
    return release_id


def begun(project: Path, loaded: LoadedSpec) -> HeadStart | None:
    with ExitStack() as resources:
        ctx = RunContext(loaded=loaded, run_id="r", run_dir=project / "run", env={},
                         resources=resources, promote_to="staging")
        begin(ctx)
        return ctx.run_scoped(HeadStart)


def test_nothing_starts_ahead_without_a_check_or_a_live_release(project: Path) -> None:
    loaded = load_spec(project / "serve.yaml", "staging")
    assert begun(project, with_check(loaded)) is None                     # check off
    assert begun(project, with_check(loaded, gate=True, against="recorded")) is None
    assert begun(project, with_check(loaded, gate=True)) is None          # nothing live


def test_a_live_release_it_cannot_start_is_the_stages_reason(project: Path) -> None:
    loaded = with_check(load_spec(project / "serve.yaml", "staging"), gate=True)
    own = loaded.canonical_json().replace('"device":"cpu"', '"device":"gpu"')
    release_id = publish_live(project, loaded, own)
    ahead = begun(project, loaded)
    assert ahead is not None and ahead.release_id == release_id and ahead.ready is None
    with pytest.raises(LiveUnservable, match="runs on gpu, this run on cpu"):
        ahead.served()


def test_quiet_waits_for_background_work_and_says_for_what(project: Path) -> None:
    said: list[str] = []
    with ExitStack() as resources:
        ctx = RunContext(loaded=load_spec(project / "serve.yaml", None), run_id="r",
                         run_dir=project / "run", env={}, resources=resources,
                         progress=lambda stage, done, total, text: said.append(text))
        booting: Future[int] = Future()
        done: Future[int] = Future()
        done.set_result(1)
        ctx.quiet_before_measuring(done, "a finished start")
        ctx.quiet_before_measuring(booting, "the live release's start")
        timer = threading.Timer(0.2, booting.set_result, [2])
        timer.start()
        ctx.quiet("latency")
        assert booting.done()
        assert said == ["waiting for the live release's start"]
        ctx.quiet("saturation")            # waited for once
        assert said == ["waiting for the live release's start"]
