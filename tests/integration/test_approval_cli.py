"""Approvals and integrity on the local store through the real CLI, as a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.digest import sha256_bytes
from pipeline.release.pointers import read_pointer
from pipeline.release.store.local import LocalStore
from tests.support.policy import NAME, audit, policy_store, staged


@pytest.fixture
def store(project: Path) -> LocalStore:
    return policy_store(project)


def run(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=project, text=True,
                          capture_output=True, timeout=120, env=dict(os.environ))


def test_the_cli_refuses_tampered_blobs_and_self_approval(project: Path,
                                                          store: LocalStore) -> None:
    first = staged(store, b"model-1")
    second = staged(store, b"model-2")
    before = audit(store)
    refused = run(project, "promote", "production", "--release", second, "--approved-by",
                  "alice")
    assert refused.returncode == 5, refused.stderr
    assert refused.stderr.strip() == (
        f"error: release {second} is approved only by its creator alice (created by alice, "
        "alice@build-host): environments/production.yaml approval.distinct_from_creator "
        "requires an approval by someone else")

    (store.root / "blobs" / "sha256" / sha256_bytes(b"model-1")).write_bytes(b"MODEL-1")
    for args in (["promote", "production", "--release", first, "--approved-by", "rita"],
                 ["rollback", "staging"]):
        result = run(project, *args)
        assert result.returncode == 3, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "model: blob " in lines[0] and "is corrupt" in lines[0]
    assert audit(store) == before
    assert read_pointer(store, NAME, "staging")[0].current == second
    assert read_pointer(store, NAME, "production")[0].current is None

    moved = run(project, "promote", "production", "--release", second, "--approved-by", "rita")
    assert moved.returncode == 0, moved.stderr
    shown = json.loads(run(project, "history", "production", "--format", "json").stdout)
    event = shown["events"][0]
    assert {"action", "release_id", "previous_release_id", "at", "by"} <= set(event)
    assert event["approved_by"] == ["rita"] and event["actor"]["via"] == "local"
    assert "@" in event["actor"]["user"] and "aws_caller" not in event["actor"]
