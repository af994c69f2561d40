"""The regression gate fails closed when the live release exists but cannot be read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.digest import sha256_bytes
from pipeline.release.manifest import BlobSource, publish_release, utc_now
from pipeline.release.manifest_record import Manifest
from pipeline.release.pointer_event import PointerAction
from pipeline.release.pointers import move_pointer
from pipeline.release.regression import live_release, live_release_gate
from pipeline.release.store import open_store
from tests.support.cli import cli, latest_record
from tests.support.moto_s3 import S3Server

pytestmark = pytest.mark.integration


def verification_blob(store: Path, name: str, release_id: str) -> Path:
    manifest = json.loads((store / "releases" / name / f"{release_id}.json").read_text())
    [blob] = [b for b in manifest["blobs"] if b["role"] == "verification"]
    return store / "blobs" / "sha256" / str(blob["digest"])


def test_an_unreadable_live_release_blocks_publish_under_the_gate(fast_project: Path) -> None:
    spec = fast_project / "serve.yaml"
    spec.write_text(spec.read_text().replace("saturation: {max_concurrency: 4",
                                             "saturation: {enabled: false, max_concurrency: 4"))
    first = cli(["promote", "staging"], fast_project)
    assert first.returncode == 0, first.stdout + first.stderr
    store = fast_project / ".serve-pipeline" / "store"
    live = json.loads(cli(["history", "staging", "--format", "json"], fast_project).stdout)
    verification_blob(store, "fraud-mlp", live["current"]).unlink()

    spec.write_text(spec.read_text().replace(
        "failure: {}", "failure: {}\n  regression: {gate: true, against: recorded, "
        "metrics: [latency.p99_ms]}"))
    blocked = cli(["promote", "staging"], fast_project)
    assert blocked.returncode == 3, blocked.stdout + blocked.stderr   # a store fault
    [line] = [s for s in blocked.stderr.splitlines() if s.startswith("error:")]
    assert "regression.live_release: unreadable: live release " + live["current"] in line
    assert "cannot read its verification blob" in line and "is missing" in line
    assert "nothing was published" in line
    after = json.loads(cli(["history", "staging", "--format", "json"], fast_project).stdout)
    assert after == live                                  # nothing promoted
    assert len(list((store / "releases").rglob("*.json"))) == 1   # nothing released

    spec.write_text(spec.read_text().replace("gate: true", "gate: false"))
    unguarded = cli(["promote", "staging"], fast_project)
    assert unguarded.returncode == 0, unguarded.stdout + unguarded.stderr
    publish = next(s for s in latest_record(fast_project)["stages"] if s["name"] == "publish")
    assert "not compared with the live release" in publish["message"]
    assert "is missing" in publish["details"]["comparison"]["unavailable"]


def test_an_s3_live_release_whose_blob_was_replaced_is_unreadable(s3_env: S3Server,
                                                                  tmp_path: Path) -> None:
    bucket = s3_env.new_bucket()
    store = open_store(f"s3://{bucket}/releases", tmp_path)
    verification = b'{"stages": []}'
    digest = sha256_bytes(verification)
    release_id = publish_release(store, "demo", [
        BlobSource("verification", None, verification, digest)],
        Manifest.from_json({"run_id": "r"}), utc_now()).release_id
    move_pointer(store, "demo", "staging", release_id, PointerAction.PROMOTE, "tester")
    assert live_release(store, "demo", "staging").problem is None

    s3_env.client().put_object(Bucket=bucket, Key=f"releases/blobs/sha256/{digest}",
                               Body=b'{"stages": [1]}')
    found = live_release(store, "demo", "staging")
    assert found.release_id == release_id and found.problem is not None
    assert "cannot read its verification blob" in found.problem
    assert not live_release_gate(found).passed
