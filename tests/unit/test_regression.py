from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.digest import sha256_bytes
from pipeline.record import RunRecord
from pipeline.release.manifest import BlobSource, publish_release, utc_now
from pipeline.release.manifest_record import Manifest
from pipeline.release.pointer_event import PointerAction
from pipeline.release.pointers import move_pointer
from pipeline.release.regression import (
    fallbacks_used,
    live_release,
    live_release_gate,
    regression_gates,
)
from pipeline.release.store import open_store
from pipeline.release.store.local import LocalStore
from pipeline.spec.models import RegressionStage


def record(p99: float, throughput: float) -> RunRecord:
    return RunRecord.from_json(raw(p99, throughput))


def raw(p99: float, throughput: float) -> dict[str, Any]:
    return {"stages": [
        {"name": "latency", "metrics": {"p99_ms": p99, "p95_ms": p99 * 0.8,
                                        "throughput_rps": throughput, "error_rate": 0.0,
                                        "concurrency": 8.0}},
        {"name": "saturation", "metrics": {"knee_throughput_rps": throughput * 2}}]}


def test_a_slower_release_fails_the_gate_and_a_similar_one_passes() -> None:
    settings = RegressionStage(gate=True)
    gates, deltas = regression_gates(record(13.0, 900.0), record(10.0, 1000.0), settings)
    failed = {g.name for g in gates if not g.passed}
    assert "regression.latency.p99_ms" in failed          # +30 %
    assert "regression.latency.throughput_rps" not in failed   # -10 %: at the tolerance
    assert any(d.regressed and d.metric == "p99_ms" for d in deltas)
    gates, _ = regression_gates(record(10.2, 995.0), record(10.0, 1000.0), settings)
    assert all(g.passed for g in gates)


def test_only_watched_metrics_become_gates() -> None:
    settings = RegressionStage(gate=True, metrics=["latency.p99_ms"])
    gates, _ = regression_gates(record(20.0, 100.0), record(10.0, 1000.0), settings)
    assert [g.name for g in gates] == ["regression.latency.p99_ms"]


def test_a_watched_metric_missing_on_either_side_fails_its_gate() -> None:
    settings = RegressionStage(gate=True)
    run = record(10.0, 1000.0)
    run.stages = run.stages[:1]                            # no saturation in this run
    gates = {g.name: g for g in regression_gates(run, record(10.0, 1000.0), settings)[0]}
    knee = gates["regression.saturation.knee_throughput_rps"]
    assert not knee.passed and knee.observed == "missing from this run"
    baseline = record(10.0, 1000.0)
    del baseline.stages[0].metrics["p95_ms"]
    baseline.release_id = "r-live"
    gates = {g.name: g for g in regression_gates(record(10.0, 1000.0), baseline, settings)[0]}
    assert gates["regression.latency.p95_ms"].observed == "missing from the live release r-live"
    assert not gates["regression.latency.p95_ms"].passed
    assert gates["regression.latency.p99_ms"].passed


def test_capacity_is_compared_with_the_knee_of_a_release_measured_before_it() -> None:
    settings = RegressionStage(gate=True, metrics=["saturation.capacity_rps"])
    baseline = record(10.0, 500.0)                         # knee_throughput_rps 1000, no capacity
    run = record(10.0, 500.0)
    run.stages[1].metrics["capacity_rps"] = 850.0         # 15 % under the old knee
    gates, _ = regression_gates(run, baseline, settings)
    assert [(g.name, g.observed, g.passed) for g in gates] == [
        ("regression.saturation.capacity_rps", 15.0, False)]
    assert fallbacks_used(baseline, settings) == {
        "saturation.capacity_rps": "saturation.knee_throughput_rps"}
    run.stages[1].metrics["capacity_rps"] = 950.0
    assert regression_gates(run, baseline, settings)[0][0].passed


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    opened = open_store("file://store", tmp_path)
    assert isinstance(opened, LocalStore)
    return opened


def live(store: LocalStore) -> tuple[str, str]:
    """A release live in staging with a verification blob: (release id, blob digest)."""
    verification = json.dumps(raw(10.0, 1000.0)).encode()
    digest = sha256_bytes(verification)
    release_id = publish_release(store, "demo", [
        BlobSource("verification", None, verification, digest)],
        Manifest.from_json({"run_id": "r"}), utc_now()).release_id
    move_pointer(store, "demo", "staging", release_id, PointerAction.PROMOTE, "tester")
    return release_id, digest


def test_no_live_release_is_not_an_unreadable_one(store: LocalStore) -> None:
    nothing = live_release(store, "demo", "staging")
    assert (nothing.release_id, nothing.problem) == (None, None)
    assert live_release_gate(nothing).passed
    release_id, _ = live(store)
    found = live_release(store, "demo", "staging")
    assert found.problem is None and found.release_id == release_id
    assert found.verification is not None and found.verification.release_id == release_id


@pytest.mark.parametrize("damage, said", [
    ("delete the blob", "cannot read its verification blob: store file://store: blob "),
    ("overwrite the blob", "cannot read its verification blob: "),
    ("delete the manifest", "cannot read its manifest: no release "),
    ("corrupt the pointer", "cannot read the staging pointer: "),
])
def test_a_live_release_that_cannot_be_read_fails_the_gate(store: LocalStore, tmp_path: Path,
                                                           damage: str, said: str) -> None:
    release_id, digest = live(store)
    root = tmp_path / "store"
    if damage == "delete the blob":
        (root / "blobs" / "sha256" / digest).unlink()
    elif damage == "overwrite the blob":
        (root / "blobs" / "sha256" / digest).write_bytes(b'{"stages": []}')
    elif damage == "delete the manifest":
        (root / "releases" / "demo" / f"{release_id}.json").unlink()
    else:
        (root / "environments" / "demo" / "staging.json").write_text("{not json")
    found = live_release(store, "demo", "staging")
    assert found.problem is not None and said in found.problem, found.problem
    gate = live_release_gate(found)
    assert gate.name == "regression.live_release" and not gate.passed
    assert str(gate.observed).startswith("unreadable: ")
