"""Signed evidence under attack, through the CLI, against the local store and against the
S3 API (moto over HTTP): each attack is refused for its own reason, the legitimate path
(staging, a signed approval by another verified identity, production, rollback) passes,
and `verify` checks a copied store with public keys alone.

Prints `custody-signatures: attacks=N refused=N wrong_reason=0`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.release.manifest import manifest_key
from pipeline.release.signing.dsse import Envelope, Signature, pae
from pipeline.release.signing.keys import FileSigner
from pipeline.release.store import open_store
from pipeline.release.store.base import blob_key
from tests.support.custody import (
    NAME,
    Attack,
    CliResult,
    CustodyWorld,
    Tally,
    base_env,
    overlay,
    tally,
    verified_creator,
    write_keys,
)
from tests.support.moto_s3 import S3Server
from tests.support.oidc_issuer import Issuer, local_issuer

pytestmark = [pytest.mark.integration, pytest.mark.reliability]
OUTCOMES: list[Tally] = []


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    with local_issuer() as running:
        yield running


def _prepare(project: Path, store_line: str | None) -> dict[str, Path]:
    keys = write_keys(project / "keys")
    (project / "environments" / "production.yaml").write_text(overlay())
    (project / "environments" / "audited.yaml").write_text(overlay(verified_identity=True))
    if store_line is not None:
        spec = project / "serve.yaml"
        spec.write_text(spec.read_text().replace("store: file://.serve-pipeline/store",
                                                 store_line))
    return keys


@pytest.fixture(params=["local", "s3"])
def world(request: pytest.FixtureRequest, project: Path, issuer: Issuer) -> CustodyWorld:
    env = base_env()
    if request.param == "local":
        keys = _prepare(project, None)
        store = open_store("file://.serve-pipeline/store", project)
        root = project / ".serve-pipeline" / "store"

        def overwrite(key: str, data: bytes) -> None:
            (root / key).write_bytes(data)

        return CustodyWorld(project, store, env, keys, issuer, "local", overwrite)
    s3: S3Server = request.getfixturevalue("s3_env")
    bucket = s3.new_bucket()
    keys = _prepare(project, f"store: s3://{bucket}/ml")
    store = open_store(f"s3://{bucket}/ml", project, s3.endpoint)
    client = s3.client()

    def put(key: str, data: bytes) -> None:
        client.put_object(Bucket=bucket, Key=f"ml/{key}", Body=data)

    return CustodyWorld(project, store, {**env, **s3.env, **{k: v for k, v in env.items()
                                                            if k.startswith("PATH")}},
                        keys, issuer, "s3", put)


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


def model_swapped(world: CustodyWorld) -> CliResult:
    """After staging and approval, the manifest's model digest is swapped for another
    release's model blob (present in the store, intact)."""
    other = world.publish(b"model-unmeasured")
    release = world.staged(b"model-measured")
    assert world.approve(release).returncode == 0
    manifest = _json(world, manifest_key(NAME, release))
    donor = next(b for b in _json(world, manifest_key(NAME, other))["blobs"]  # type: ignore
                 if b["role"] == "model")
    for blob in manifest["blobs"]:  # type: ignore[attr-defined]
        if blob["role"] == "model":
            blob.update(donor)
    manifest["model"] = {"sha256": donor["digest"]}
    world.overwrite(manifest_key(NAME, release), json.dumps(manifest, indent=2).encode())
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


ATTACKS = [
    Attack("forged attestation signature", forged_attestation,
           "attestation signature does not verify (forged or altered)"),
    Attack("approval for another release", lambda w: copied_approval(w, True),
           "is for release"),
    Attack("approval for another environment", lambda w: copied_approval(w, False),
           "is for environment audited"),
    Attack("replayed approval", replayed_approval, "replayed or spent"),
    Attack("untrusted key", untrusted_key,
           "signed by a key not trusted in environments/production.yaml approval.keys"),
    Attack("hand-written approval", hand_written, "not signed (a hand-written"),
    Attack("store verify reports a hand-written approval", store_verify_reports,
           "approval does not count: not signed"),
    Attack("manifest model digest swapped after staging", model_swapped,
           "manifest does not match its attestation: fraud-mlp/model"),
    Attack("unsigned release into a signed-only environment", unsigned_release,
           "is unsigned; environments/production.yaml attestation.required"),
    Attack("expired OIDC token", lambda w: oidc_token(w, expires_in=-3600),
           "OIDC token from SERVE_PIPELINE_OIDC_TOKEN: expired"),
    Attack("OIDC token for another audience", lambda w: oidc_token(w, audience="sts.aws"),
           "its audience is not 'serve-pipeline'"),
    Attack("GITHUB_* variables spoofed", spoofed_github,
           "its approver's identity was not verified (claimed: actor=rita-release-manager"),
    Attack("creator approves with her own key as someone else", creator_own_key,
           "is by the release's creator (same verified identity: "),
    Attack("creator approves with a key she owns", creator_verified_identity,
           "was created by the same verified identity (github:alice"),
]


def test_every_attack_is_refused_for_its_reason(world: CustodyWorld) -> None:
    outcome = tally(ATTACKS, world)
    OUTCOMES.append(outcome)
    print(outcome.line(f"custody-signatures[{world.backend}]"))
    assert outcome.failures() == []
    production = json.loads(world.cli("history", "production", "--format", "json").stdout)
    moved = {e["release_id"] for e in production["events"]}
    assert len(moved) == 2, "only the replay's two legitimate releases reached production"


def test_the_legitimate_path_passes(world: CustodyWorld) -> None:
    first = world.publish(b"model-v1")
    second = world.publish(b"model-v2")
    verified_rita = world.issuer.env()            # a job's token request, as GitHub does
    for release in (first, second):
        assert world.promote("staging", release).returncode == 0
        approved = world.approve(release, env=verified_rita)
        assert approved.returncode == 0, approved.stderr
        assert "(verified identity)" in approved.stdout
        moved = world.promote("production", release)
        assert moved.returncode == 0, moved.stderr
    back = world.cli("rollback", "production")
    assert back.returncode == 0, back.stderr
    history = json.loads(world.cli("history", "production", "--format", "json").stdout)
    assert history["current"] == first
    assert [e["approved_by"] for e in history["events"][:2]] == [["rita"], ["rita"]]
    entry = json.loads(world.store.read(world.approvals_of(second)[0]) or b"")
    assert entry["actor"]["verified"] is True
    assert entry["actor"]["oidc"]["actor"] == "rita"
    assert entry["actor"]["verified_identities"] == ["github:rita"]
    audited = world.staged(b"model-v3")
    assert world.approve(audited, environment="audited", env=verified_rita).returncode == 0
    assert world.promote("audited", audited).returncode == 0


def _copy_store(world: CustodyWorld, destination: Path) -> Path:
    """The store as another machine would receive it: every object, in a directory."""
    for key in world.store.list(""):
        target = destination / key
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(world.store.read(key) or b"")
    return destination


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_verify_a_copied_store_with_public_keys_alone(world: CustodyWorld,
                                                      tmp_path: Path) -> None:
    release = world.staged(b"model-to-verify")
    assert world.approve(release).returncode == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    keys = [str(world.project / "keys" / f"{n}.pub") for n in ("ci", "rita")]

    def verify(store: Path) -> CliResult:
        args = ["verify", release, "--store", f"file://{store}", "--format", "json"]
        for key in keys:
            args += ["--public-key", key]
        return _cli_in(world, elsewhere, args)

    copy = _copy_store(world, tmp_path / "copy")
    passed = verify(copy)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    report = json.loads(passed.stdout)
    assert report["attestation"]["signer"] == "ci" and report["ok"] is True
    assert [a["approver"] for a in report["approvals"]] == ["rita"]

    manifest = json.loads((copy / manifest_key(NAME, release)).read_bytes())
    digests = {b["role"]: b["digest"] for b in manifest["blobs"]}
    approval = next(p for p in (copy / "audit" / NAME).glob("*-approve-production-*"))
    targets = {"subject blob": copy / blob_key(digests["model"]),
               "attestation": copy / blob_key(digests["attestation"]),
               "approval": approval}
    for what, path in targets.items():
        broken = _copy_store(world, tmp_path / f"broken-{what.replace(' ', '-')}")
        _flip(broken / path.relative_to(copy), len(path.read_bytes()) // 2)
        failed = verify(broken)
        assert failed.returncode == 1, f"{what}: {failed.stdout}{failed.stderr}"
        assert json.loads(failed.stdout)["problems"], what


def _cli_in(world: CustodyWorld, folder: Path, args: list[str]) -> CliResult:
    """The CLI run in a folder with no spec and no store credentials: offline."""
    env = {k: v for k, v in world.env.items() if not k.startswith("AWS_")}
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=folder, text=True,
                          capture_output=True, timeout=120, env=env)


def test_zz_custody_signatures_tally(capsys: pytest.CaptureFixture[str]) -> None:
    """The line the integrator joins with the policy attacks' tally."""
    if not OUTCOMES:
        pytest.skip("no attack run in this session")
    total = Tally(())
    for outcome in OUTCOMES:
        total = total + outcome
    with capsys.disabled():
        print("\n" + total.line("custody-signatures"))
    assert total.refused == total.attacks and total.wrong_reason == 0
