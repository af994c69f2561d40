"""The attacks on signed evidence: forged, copied, replayed, untrusted or hand-written
signatures, a manifest edited after staging, and identities that are only claimed
(tests/reliability/test_custody.py runs them in one world per store, in order).
"""

from __future__ import annotations

import json

from pipeline.digest import sha256_bytes
from pipeline.release.manifest import manifest_key
from pipeline.release.pointers import read_pointer
from pipeline.release.signing.approvals import write_approval
from pipeline.release.signing.dsse import Envelope, Signature, pae
from pipeline.release.signing.keys import FileSigner
from tests.support.custody import (
    NAME,
    Attack,
    CliResult,
    CustodyWorld,
    contains,
    verified_creator,
)
from tests.support.oidc_issuer import local_issuer


def _json(world: CustodyWorld, key: str) -> dict[str, object]:
    body: dict[str, object] = json.loads(world.store.read(key) or b"{}")
    return body


def forged_attestation(world: CustodyWorld) -> CliResult:
    """The attestation re-signed by mallory under ci's key id, stored as a new blob the
    manifest is rewritten to name."""
    release = world.staged(b"model-forged")
    assert world.approve(release).returncode == 0
    manifest = _json(world, manifest_key(NAME, release))
    summary = manifest["attestation"]
    assert isinstance(summary, dict)
    envelope = Envelope.from_bytes(world.store.read_blob(summary["digest"]))
    mallory = FileSigner.from_file(world.keys["mallory"])
    forged = Envelope(envelope.payload_type, envelope.payload, (Signature(
        FileSigner.from_file(world.keys["ci"]).keyid,
        mallory.sign(pae(envelope.payload_type, envelope.payload))),))
    digest, _ = world.store.put_blob_bytes(forged.to_bytes())
    summary["digest"] = digest
    for blob in manifest["blobs"]:  # type: ignore[attr-defined]
        if blob["role"] == "attestation":
            blob["digest"], blob["size"] = digest, len(forged.to_bytes())
            blob.pop("stored", None)
    world.overwrite(manifest_key(NAME, release), json.dumps(manifest).encode())
    return world.promote("production", release)


def copied_approval(world: CustodyWorld, to_release: bool) -> CliResult:
    """rita's approval of one release (or for another environment) copied under the name
    of the release / environment under attack, its outer fields edited to match."""
    approved = world.staged(b"model-approved-" + str(to_release).encode())
    target = world.staged(b"model-target-" + str(to_release).encode()) if to_release \
        else approved
    source_env = "production" if to_release else "audited"
    verified = world.issuer.env(world.issuer.mint(actor="rita"))
    assert world.approve(approved, environment=source_env, env=verified).returncode == 0
    key = world.approvals_of(approved, source_env)[0]
    entry = _json(world, key)
    entry.update(release_id=target, environment="production")
    stolen = key.replace(f"-approve-{source_env}-", "-approve-production-").replace(
        ".json", "0.json")
    world.overwrite(stolen, json.dumps(entry).encode())
    return world.promote("production", target)


def replayed_approval(world: CustodyWorld) -> CliResult:
    """A spent approval: `first` went to production with it, was rolled back; the same
    approval (also copied to a new name) is offered again."""
    earlier = world.staged(b"model-earlier")
    assert world.approve(earlier).returncode == 0
    assert world.promote("production", earlier).returncode == 0
    first = world.staged(b"model-replayed")
    assert world.approve(first).returncode == 0
    assert world.promote("production", first).returncode == 0
    assert world.cli("rollback", "production").returncode == 0
    key = world.approvals_of(first)[0]
    world.overwrite(key.replace(".json", "1.json"), world.store.read(key) or b"")
    return world.promote("production", first)


def untrusted_key(world: CustodyWorld) -> CliResult:
    release = world.staged(b"model-untrusted")
    world.sign_directly(release, "mallory", by="rita")
    return world.promote("production", release)


def hand_written(world: CustodyWorld) -> CliResult:
    release = world.staged(b"model-hand-written")
    entry = {"action": "approve", "release_id": release, "environment": "production",
             "name": NAME, "by": "rita", "at": "2026-01-01T00:00:00.000000Z", "note": ""}
    world.overwrite(f"audit/{NAME}/20260101T000000000000Z-approve-production-abcdef.json",
                    json.dumps(entry).encode())
    return world.promote("production", release)


def store_verify_reports(world: CustodyWorld) -> CliResult:
    hand_written(world)
    return world.cli("store", "verify")


def swap_model(world: CustodyWorld, release: str, other: str) -> None:
    """Rewrite `release`'s manifest to name `other`'s model blob (present and intact)."""
    manifest = _json(world, manifest_key(NAME, release))
    donor = next(b for b in _json(world, manifest_key(NAME, other))["blobs"]  # type: ignore
                 if b["role"] == "model")
    for blob in manifest["blobs"]:  # type: ignore[attr-defined]
        if blob["role"] == "model":
            blob.update(donor)
    manifest["model"] = {"sha256": donor["digest"]}
    world.overwrite(manifest_key(NAME, release), json.dumps(manifest, indent=2).encode())


def model_swapped(world: CustodyWorld) -> CliResult:
    """After staging and approval, the manifest's model digest is swapped for another
    release's model blob (present in the store, intact)."""
    other = world.publish(b"model-unmeasured")
    release = world.staged(b"model-measured")
    assert world.approve(release).returncode == 0
    swap_model(world, release, other)
    return world.promote("production", release)


def unsigned_release(world: CustodyWorld) -> CliResult:
    release = world.staged(b"model-unsigned", signer=None)
    world.sign_directly(release, "rita", by="rita")
    return world.promote("production", release)


def oidc_token(world: CustodyWorld, **mint: object) -> CliResult:
    release = world.staged(b"model-oidc-" + json.dumps(mint).encode())
    token = world.issuer.mint(**mint)  # type: ignore[arg-type]
    return world.approve(release, env=world.issuer.env(token))


def spoofed_github(world: CustodyWorld) -> CliResult:
    release = world.staged(b"model-spoofed")
    spoof = {"GITHUB_ACTIONS": "true", "GITHUB_ACTOR": "rita-release-manager",
             "GITHUB_RUN_ID": "999999", "GITHUB_REPOSITORY": "acme/fraud"}
    approved = world.approve(release, environment="audited", env=spoof)
    assert approved.returncode == 0, approved.stderr
    entry = _json(world, world.approvals_of(release, "audited")[0])
    assert entry["actor"] == {**entry["actor"], "verified": False,  # type: ignore[dict-item]
                              "claimed": {"actor": "rita-release-manager",
                                          "repository": "acme/fraud", "run_id": "999999"}}
    return world.promote("audited", release)


def creator_own_key(world: CustodyWorld) -> CliResult:
    """alice signs her release and approves it with the same key, as "bob"."""
    release = world.staged(b"model-alice", signer="alice")
    world.sign_directly(release, "alice", by="bob")
    return world.promote("production", release)


def creator_verified_identity(world: CustodyWorld) -> CliResult:
    """CI built the release for the verified github:alice; alice approves with her key,
    whose owner is github:alice, typing another name."""
    release = world.staged(b"model-by-alice-ci", creator=verified_creator("alice"))
    return world.approve(release, key="alice", by="release-manager")


def rogue_issuer(world: CustodyWorld) -> CliResult:
    """rita's identity "verified" by an OIDC issuer the approver chose (one of her own),
    not one `audited` trusts."""
    release = world.staged(b"model-rogue-issuer")
    with local_issuer() as rogue:
        approved = world.approve(release, environment="audited",
                                 env=rogue.env(rogue.mint(actor="rita")))
    assert approved.returncode == 0, approved.stderr
    return world.promote("audited", release)


def self_verified(world: CustodyWorld, token_actor: str | None) -> CliResult:
    """rita holds an approver key and writes a "verified" GitHub identity into her own
    signed approval, with no token (`token_actor` None) or with a real token of another
    actor: the claims are text she wrote."""
    release = world.staged(b"model-self-verified-" + str(token_actor).encode())
    pointer, _ = read_pointer(world.store, NAME, "audited")
    data = world.store.read(manifest_key(NAME, release))
    assert data is not None
    identity: dict[str, object] = {
        "user": "rita@github-actions", "via": "github-actions", "verified": True,
        "oidc": {"issuer": world.issuer.url, "audience": "serve-pipeline", "actor": "rita",
                 "sub": "repo:acme/fraud:environment:rita"},
        "verified_identities": ["github:rita"]}
    if token_actor is not None:
        identity["oidc_token"] = world.issuer.mint(actor=token_actor)
    write_approval(world.store, NAME, release, sha256_bytes(data), "audited", pointer,
                   FileSigner.from_file(world.keys["rita"]), "rita", identity)
    return world.promote("audited", release)


def copied_under_new_id(world: CustodyWorld, edit_id: bool) -> CliResult:
    """A staged release's manifest copied under a fresh release id (and, `edit_id`, with
    its release_id field rewritten to match): a release nobody published."""
    release = world.staged(b"model-copied-" + str(edit_id).encode())
    fresh = "20300101T000000Z-c0ffee00"
    data = (world.store.read(manifest_key(NAME, release)) or b"").decode()
    world.overwrite(manifest_key(NAME, fresh),
                    (data.replace(release, fresh) if edit_id else data).encode())
    return world.cli("promote", "staging", "--release", fresh)


def figures_rewritten(world: CustodyWorld, staging_record_too: bool) -> CliResult:
    """After staging and approval, the manifest's measured p99 is rewritten (the figure a
    stricter production gate reads back), and the approval given again on the rewritten
    manifest; `staging_record_too`: the staging event's manifest digest rewritten as well."""
    release = world.staged(b"model-figures-" + str(staging_record_too).encode())
    manifest = _json(world, manifest_key(NAME, release))
    manifest["stages"]["latency"]["metrics"]["p99_ms"] = 1.0  # type: ignore[index]
    rewritten = json.dumps(manifest, indent=2).encode()
    world.overwrite(manifest_key(NAME, release), rewritten)
    key = f"environments/{NAME}/staging.json"
    before = world.store.read(key)
    if staging_record_too:
        pointer = _json(world, key)
        for event in pointer["events"]:  # type: ignore[attr-defined]
            if event["release_id"] == release:
                event["manifest_sha256"] = sha256_bytes(rewritten)
        world.overwrite(key, json.dumps(pointer, indent=2).encode())
    try:
        assert world.approve(release).returncode == 0
        return world.promote("production", release)
    finally:
        if before is not None:      # staging's own history, for the attacks after this one
            world.overwrite(key, before)


def materialize_swapped(world: CustodyWorld, target_environment: bool) -> CliResult:
    """A release's manifest rewritten to name another release's model blob, then
    materialized by release id (or, staged, by environment: `target_environment`)."""
    other = world.publish(b"model-unmeasured-" + str(target_environment).encode())
    payload = b"model-to-deploy-" + str(target_environment).encode()
    # By id, a release no pointer took: only its attestation can tell (one a pointer took
    # is also held to the manifest that move recorded).
    release = world.staged(payload) if target_environment else world.publish(payload)
    swap_model(world, release, other)
    where = world.project / f"deployed-{target_environment}"
    return world.cli("materialize", "staging" if target_environment else release,
                     "--to", str(where))


def rewound_pointer(world: CustodyWorld) -> CliResult:
    """A spent approval made to count again by rewinding the pointer: `second` went to
    `audited` with its approval and was rolled back; the pointer is put back as it was
    before, where that approval's recorded history matches again. The pointer is restored
    after."""
    key = f"environments/{NAME}/audited.json"
    verified = world.issuer.env()
    first, second = world.staged(b"model-rewind-1"), world.staged(b"model-rewind-2")
    assert world.approve(first, environment="audited", env=verified).returncode == 0
    assert world.promote("audited", first).returncode == 0
    before = world.store.read(key)
    assert world.approve(second, environment="audited", env=verified).returncode == 0
    assert world.promote("audited", second).returncode == 0
    assert world.cli("rollback", "audited").returncode == 0
    after = world.store.read(key)
    assert before is not None and after is not None
    world.overwrite(key, before)
    try:
        return world.promote("audited", second)
    finally:
        world.overwrite(key, after)


def hand_written_pointer(world: CustodyWorld) -> CliResult:
    """production's pointer written by hand onto a staged, never approved release, with
    an invented event that names an approver; `store verify --repair` must neither accept
    it nor write it an audit entry. The pointer is restored after."""
    release = world.staged(b"model-pointer-by-hand")
    key = f"environments/{NAME}/production.json"
    before = world.store.read(key)
    pointer = json.loads(before or b'{"events": []}')
    events = pointer.setdefault("events", [])
    events.append({"action": "promote", "release_id": release,
                   "previous_release_id": pointer.get("current"), "at": "2030-01-01T00:00:00Z",
                   "by": "rita", "approved_by": ["rita"],
                   "actor": {"user": "rita@ci", "verified": True}})
    pointer["current"] = release
    world.overwrite(key, json.dumps(pointer).encode())
    try:
        result = world.cli("store", "verify", "--repair")
        assert not [k for k in world.store.list(f"audit/{NAME}/") if "20300101" in k], \
            "an audit entry was written for the forged move"
        return result
    finally:
        if before is not None:
            world.overwrite(key, before)


SIGNED_ATTACKS = [
    Attack("forged attestation signature", forged_attestation,
           contains("attestation signature does not verify (forged or altered)")),
    Attack("approval for another release", lambda w: copied_approval(w, True),
           contains("is for release")),
    Attack("approval for another environment", lambda w: copied_approval(w, False),
           contains("is for environment audited")),
    Attack("replayed approval", replayed_approval, contains("replayed or spent")),
    Attack("untrusted key", untrusted_key,
           contains("signed by a key not trusted in environments/production.yaml "
                    "approval.keys")),
    Attack("hand-written approval", hand_written, contains("not signed (a hand-written")),
    Attack("store verify reports a hand-written approval", store_verify_reports,
           contains("approval does not count: not signed")),
    Attack("manifest model digest swapped after staging", model_swapped,
           contains("manifest does not match its attestation: fraud-mlp/model")),
    Attack("unsigned release into a signed-only environment", unsigned_release,
           contains("is unsigned; environments/production.yaml attestation.required")),
    Attack("expired OIDC token", lambda w: oidc_token(w, expires_in=-3600),
           contains("OIDC token from SERVE_PIPELINE_OIDC_TOKEN: expired")),
    Attack("OIDC token for another audience", lambda w: oidc_token(w, audience="sts.aws"),
           contains("its audience is not 'serve-pipeline'")),
    Attack("GITHUB_* variables spoofed", spoofed_github,
           contains("its approver's identity was not verified (claimed: "
                    "actor=rita-release-manager")),
    Attack("creator approves with her own key as someone else", creator_own_key,
           contains("is by the release's creator (same verified identity: ")),
    Attack("creator approves with a key she owns", creator_verified_identity,
           contains("was created by the same verified identity (github:alice")),
    Attack("identity verified by an issuer the approver chose", rogue_issuer,
           contains("an issuer environments/audited.yaml approval.oidc_issuers does not "
                    "trust")),
    Attack("a verified identity written by the approver, no token",
           lambda w: self_verified(w, None),
           contains("its approver's verified identity is not proven: it carries no OIDC "
                    "token")),
    Attack("a verified identity written by the approver, another's token",
           lambda w: self_verified(w, "mallory"),
           contains("its recorded identity is not the one its OIDC token says")),
    Attack("manifest copied under a fresh id", lambda w: copied_under_new_id(w, False),
           contains("its manifest names release")),
    Attack("manifest copied under a fresh id, its id rewritten",
           lambda w: copied_under_new_id(w, True),
           contains("the manifest's release_id '20300101T000000Z-c0ffee00' is not the "
                    "attested")),
    Attack("measured figures and staging's record rewritten, approved again",
           lambda w: figures_rewritten(w, True),
           contains("the manifest's stage results (metrics) differ from the attested")),
    Attack("materialize a release whose model was swapped",
           lambda w: materialize_swapped(w, False),
           contains("is not deployed: manifest does not match its attestation: "
                    "fraud-mlp/model")),
    Attack("pointer rewound to make a spent approval count again", rewound_pointer,
           contains("moves of audited that its pointer does not hold")),
    Attack("production's pointer written by hand, then store verify --repair",
           hand_written_pointer,
           contains("has no signed approval that counts (environments/production.yaml "
                    "approval.required)")),
    Attack("materialize staging after its manifest was rewritten",
           lambda w: materialize_swapped(w, True), contains("changed since it was promoted")),
]
