"""Signed approvals and integrity on the local store through the real CLI, as a process."""

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
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "ACTIONS_"))}
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=project, text=True,
                          capture_output=True, timeout=120, env=env)


def approve(project: Path, release: str, key: str) -> subprocess.CompletedProcess[str]:
    return run(project, "approve", release, "--env", "production", "--key",
               str(project / "keys" / f"{key}.pem"), "--by", key, "--yes")


def test_the_cli_refuses_typed_approvals_tampered_blobs_and_self_approval(
        project: Path, store: LocalStore) -> None:
    first = staged(store, b"model-1")
    second = staged(store, b"model-2")
    before = audit(store)
    typed = run(project, "promote", "production", "--release", second, "--approved-by", "rita")
    assert typed.returncode == 2, typed.stderr
    assert typed.stderr.strip().startswith("error: --approved-by rita: a typed name is not "
                                           "an approval")
    own = approve(project, second, "alice")
    assert own.returncode == 5, own.stderr
    assert f"release {second} was created by the same verified identity (github:alice)" \
        in own.stderr
    assert audit(store) == before

    assert approve(project, first, "rita").returncode == 0
    (store.root / "blobs" / "sha256" / sha256_bytes(b"model-1")).write_bytes(b"MODEL-1")
    for args in (["promote", "production", "--release", first], ["rollback", "staging"]):
        result = run(project, *args)
        assert result.returncode == 3, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "model: blob " in lines[0] and "is corrupt" in lines[0]
    assert read_pointer(store, NAME, "staging")[0].current == second
    assert read_pointer(store, NAME, "production")[0].current is None

    approved = approve(project, second, "rita")
    assert approved.returncode == 0, approved.stderr
    assert "(unverified identity)" in approved.stdout
    moved = run(project, "promote", "production", "--release", second)
    assert moved.returncode == 0, moved.stderr
    shown = json.loads(run(project, "history", "production", "--format", "json").stdout)
    event = shown["events"][0]
    assert {"action", "release_id", "previous_release_id", "at", "by"} <= set(event)
    assert event["approved_by"] == ["rita"] and event["actor"]["via"] == "local"
    assert "@" in event["actor"]["user"] and "aws_caller" not in event["actor"]
