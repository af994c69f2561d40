"""Approvals and integrity on the local store, through the library (the real CLI:
tests/integration/test_approval_cli.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.digest import sha256_bytes
from pipeline.errors import PolicyError, StoreError
from pipeline.release.identity import acting_identity, claimed_name, names_of
from pipeline.release.pointers import read_pointer
from pipeline.release.policy import promote_existing
from pipeline.release.promotion import approvals, approve
from pipeline.release.store.local import LocalStore
from pipeline.spec.loading import load_spec
from tests.support.policy import NAME, audit, policy_store, staged


@pytest.fixture
def store(project: Path) -> LocalStore:
    return policy_store(project)


def test_identity_inside_and_outside_github_actions() -> None:
    github = {"GITHUB_ACTIONS": "true", "GITHUB_ACTOR": "octocat",
              "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "acme/m",
              "GITHUB_RUN_ID": "7", "USER": "runner"}
    assert acting_identity(github) == {"user": "octocat", "via": "github-actions",
                                       "run_url": "https://github.com/acme/m/actions/runs/7"}
    local = acting_identity({"USER": "rita", "GITHUB_ACTOR": "octocat"})
    assert local["via"] == "local" and local["user"].startswith("rita@")
    assert claimed_name(None, github) == "octocat" and claimed_name("bob", github) == "bob"
    assert names_of("Alice", {"user": "al@host"}) == {"alice", "al@host", "al"}


def test_self_approval_is_refused_and_records_nothing(project: Path, store: LocalStore) -> None:
    production = load_spec(project / "serve.yaml", "production")
    release = staged(store, b"model")
    before = audit(store)
    for claimed in ("alice", "alice@build-host"):
        with pytest.raises(PolicyError, match=r"approved only by its creator .*"
                           r"environments/production.yaml approval.distinct_from_creator"):
            promote_existing(store, production, "production", release, "ci",
                             approved_by=claimed)
    approve(store, NAME, release, "production", "alice")    # stored, but it does not count
    with pytest.raises(PolicyError, match="approved only by its creator alice"):
        promote_existing(store, production, "production", release, "ci")
    assert read_pointer(store, NAME, "production")[0].events == []
    assert len(audit(store)) == len(before) + 1

    event = promote_existing(store, production, "production", release, "ci",
                             approved_by="rita", actor={"user": "ci@runner", "via": "local"}).event
    assert event["approved_by"] == ["rita"] and event["actor"]["user"] == "ci@runner"
    assert [a["by"] for a in approvals(store, NAME, release, "production")] == ["alice"]


def test_without_the_policy_key_the_creator_may_approve(project: Path,
                                                        store: LocalStore) -> None:
    (project / "environments" / "production.yaml").write_text(
        "requires: [staging]\napproval: {required: true}\n")
    production = load_spec(project / "serve.yaml", "production")
    release = staged(store, b"model")
    event = promote_existing(store, production, "production", release, "ci",
                             approved_by="alice").event
    assert event["approved_by"] == ["alice"]


def test_a_failed_promotion_records_no_approval(project: Path, store: LocalStore) -> None:
    production = load_spec(project / "serve.yaml", "production")
    release = staged(store, b"model")
    blob = store.root / "blobs" / "sha256" / sha256_bytes(b"model")
    blob.write_bytes(b"MODEL")                                  # same size, other bytes
    before = audit(store)
    with pytest.raises(StoreError, match="corrupt"):
        promote_existing(store, production, "production", release, "ci", approved_by="rita")
    assert audit(store) == before and approvals(store, NAME, release, "production") == []
