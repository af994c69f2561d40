"""A local store whose production environment needs staging and a signed approval by
someone other than the creator, its approvers' key pairs, and releases staged in it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.digest import canonical_json, sha256_bytes
from pipeline.release.manifest import BlobSource, manifest_digest, publish_release, utc_now
from pipeline.release.manifest_record import Manifest
from pipeline.release.pointer_event import PointerAction
from pipeline.release.pointers import move_pointer, read_pointer
from pipeline.release.signing.approval_record import Approval
from pipeline.release.signing.approvals import write_approval
from pipeline.release.signing.keys import FileSigner
from pipeline.release.store import open_store
from pipeline.release.store.base import Store
from pipeline.release.store.local import LocalStore
from tests.support.custody import write_keys
from tests.support.recorded import recorded

NAME = "fraud-mlp"
# alice's key is hers (owner github:alice): her approval of her own release does not count.
APPROVERS = ("keys: [{id: rita, public_key: keys/rita.pub}, "
             "{id: alice, public_key: keys/alice.pub, owner: 'github:alice'}]")
POLICY = ("requires: [staging]\n"
          f"approval: {{required: true, distinct_from_creator: true, {APPROVERS}}}\n")


SHIPPED_KEY = "{id: release-manager, public_key: environments/keys/release-manager.pub}"


# For runs of the fast spec, whose capacity may be inconclusive: its own gates, rita's key.
RITA_APPROVES = ("requires: [staging]\n"
                 "approval: {required: true, keys: [{id: rita, public_key: keys/rita.pub}]}\n")


def trust_rita(project: Path) -> dict[str, Path]:
    """The shipped production overlay as it is, trusting rita's key instead of the
    placeholder release manager's; returns the keys."""
    keys = approver_keys(project)
    production = project / "environments" / "production.yaml"
    text = production.read_text()
    assert SHIPPED_KEY in text
    production.write_text(text.replace(SHIPPED_KEY, "{id: rita, public_key: keys/rita.pub}"))
    return keys


def approver_keys(project: Path) -> dict[str, Path]:
    """Private keys of rita and alice (and mallory, whom no overlay trusts), under keys/."""
    return write_keys(project / "keys", ("rita", "alice", "mallory"))


def policy_store(project: Path, policy: str = POLICY) -> LocalStore:
    """The project's local store, with production requiring staging and a signed approval
    by someone else (`policy`); the approvers' keys under keys/."""
    approver_keys(project)
    (project / "environments" / "production.yaml").write_text(policy)
    opened = open_store("file://.serve-pipeline/store", project)
    assert isinstance(opened, LocalStore)
    return opened


def creator_actor(creator: str) -> dict[str, Any]:
    """A creator whose identity was verified (as in GitHub Actions with OIDC)."""
    return {"user": f"{creator}@github-actions", "via": "github-actions", "verified": True,
            "verified_identities": [f"github:{creator}"]}


def staged(store: LocalStore, payload: bytes, creator: str = "alice") -> str:
    body = {"run_id": "r", "created_by": creator, "created_by_actor": creator_actor(creator),
            **recorded()}
    # The run record `approve` shows before it signs.
    verification = canonical_json({"run_id": "r", "stages": []})
    sources = [BlobSource("model", None, payload, sha256_bytes(payload)),
               BlobSource("verification", None, verification, sha256_bytes(verification))]
    release = publish_release(store, NAME, sources, Manifest.from_json(body), utc_now()).release_id
    move_pointer(store, NAME, "staging", release, PointerAction.PROMOTE, "ci")
    return release


def sign_approval(store: Store, project: Path, release: str, key: str = "rita",
                  environment: str = "production", by: str | None = None) -> Approval:
    """An approval of `release` for `environment`, signed with keys/<key>.pem, as
    `serve-pipeline approve --key` writes it."""
    pointer, _ = read_pointer(store, NAME, environment)
    signer = FileSigner.from_file(project / "keys" / f"{key}.pem")
    return write_approval(store, NAME, release, manifest_digest(store, NAME, release),
                          environment, pointer, signer, by or key,
                          {"user": f"{by or key}@laptop", "via": "local", "verified": False})


def audit(store: LocalStore) -> list[str]:
    return store.list(f"audit/{NAME}/")


COMMIT = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def config_pbtxt(delay_us: int, count: int) -> bytes:
    return (f'name: "fraud-mlp"\nbackend: "python"\nmax_batch_size: 32\n'
            f"dynamic_batching {{\n  preferred_batch_size: [8, 16]\n"
            f"  max_queue_delay_microseconds: {delay_us}\n}}\n"
            f"instance_group [{{ count: {count} kind: KIND_CPU }}]\n").encode()


def configured_release(store: LocalStore, model: bytes, delay: int, count: int, dirty: bool
                       ) -> str:
    """A release with a served config (a Triton config.pbtxt with this queue delay and
    instance count) and the git state it claims to be built from, created by alice."""
    config = config_pbtxt(delay, count)
    verification = canonical_json({"run_id": "r", "stages": []})
    sources = [BlobSource("model", None, model, sha256_bytes(model)),
               BlobSource("config.pbtxt", None, config, sha256_bytes(config)),
               BlobSource("verification", None, verification, sha256_bytes(verification))]
    body = {"run_id": "r", "created_by": "alice", "created_by_actor": creator_actor("alice"),
            "verified_in": "staging", "model": {"sha256": sha256_bytes(model)},
            "config": {"file": "config.pbtxt", "sha256": sha256_bytes(config)},
            "git": {"commit": COMMIT, "dirty": dirty}, **recorded()}
    return publish_release(store, NAME, sources, Manifest.from_json(body), utc_now()).release_id
