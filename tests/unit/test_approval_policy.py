"""Signed approvals and integrity on the local store, through the library (the real CLI:
tests/integration/test_approval_cli.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.digest import sha256_bytes
from pipeline.errors import PolicyError, StoreError, UsageError
from pipeline.release.identity import acting_identity, claimed_name, names_of
from pipeline.release.pointers import read_pointer
from pipeline.release.policy import promote_existing
from pipeline.release.store.local import LocalStore
from pipeline.servers.specs import load_spec
from tests.support.policy import APPROVERS, NAME, audit, policy_store, sign_approval, staged


@pytest.fixture
def store(project: Path) -> LocalStore:
    return policy_store(project)


def test_github_variables_alone_are_a_claim() -> None:
    github = {"GITHUB_ACTIONS": "true", "GITHUB_ACTOR": "octocat",
              "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "acme/m",
              "GITHUB_RUN_ID": "7", "USER": "runner"}
    identity = acting_identity(github)
    assert identity["verified"] is False and identity["via"] == "local"
    assert identity["claimed"] == {"actor": "octocat", "repository": "acme/m", "run_id": "7"}
    assert "run_url" not in identity and "verified_identities" not in identity
    assert claimed_name(None, github) == "octocat" and claimed_name("bob", github) == "bob"
    assert names_of("Alice", {"user": "al@host"}) == {"alice", "al@host", "al"}


def test_a_typed_name_is_never_an_approval(project: Path, store: LocalStore) -> None:
    production = load_spec(project / "serve.yaml", "production")
    release = staged(store, b"model")
    with pytest.raises(UsageError, match="--approved-by rita: a typed name is not an approval"):
        promote_existing(store, production, "production", release, "ci", approved_by="rita")
    assert read_pointer(store, NAME, "production")[0].events == []


def test_the_creators_own_key_does_not_count(project: Path, store: LocalStore) -> None:
    production = load_spec(project / "serve.yaml", "production")
    release = staged(store, b"model")
    sign_approval(store, project, release, "alice", by="someone-else")
    with pytest.raises(PolicyError, match=r"needs a signed approval for production and none "
                       r"counts: .* is by the release's creator \(same verified identity: "
                       r"github:alice\)"):
        promote_existing(store, production, "production", release, "ci")
    assert read_pointer(store, NAME, "production")[0].events == []

    sign_approval(store, project, release, "rita")
    event = promote_existing(store, production, "production", release, "ci",
                             actor={"user": "ci@runner", "via": "local"}).event
    assert event.approved_by == ("rita",) and (event.actor or {})["user"] == "ci@runner"


def test_without_the_policy_key_the_creator_may_approve(project: Path,
                                                        store: LocalStore) -> None:
    (project / "environments" / "production.yaml").write_text(
        f"requires: [staging]\napproval: {{required: true, {APPROVERS}}}\n")
    production = load_spec(project / "serve.yaml", "production")
    release = staged(store, b"model")
    sign_approval(store, project, release, "alice")
    event = promote_existing(store, production, "production", release, "ci").event
    assert event.approved_by == ("alice",)


def test_an_untrusted_key_does_not_count(project: Path, store: LocalStore) -> None:
    production = load_spec(project / "serve.yaml", "production")
    release = staged(store, b"model")
    sign_approval(store, project, release, "mallory", by="rita")
    with pytest.raises(PolicyError, match=r"signed by a key not trusted in "
                                          r"environments/production\.yaml approval\.keys"):
        promote_existing(store, production, "production", release, "ci")


def test_a_failed_promotion_moves_nothing(project: Path, store: LocalStore) -> None:
    production = load_spec(project / "serve.yaml", "production")
    release = staged(store, b"model")
    sign_approval(store, project, release)
    blob = store.root / "blobs" / "sha256" / sha256_bytes(b"model")
    blob.write_bytes(b"MODEL")                                  # same size, other bytes
    before = audit(store)
    with pytest.raises(StoreError, match="corrupt"):
        promote_existing(store, production, "production", release, "ci")
    assert audit(store) == before
    assert read_pointer(store, NAME, "production")[0].events == []
