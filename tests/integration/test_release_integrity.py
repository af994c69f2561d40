"""Integrity and approvals on every pointer move, through the real CLI against moto over HTTP.

The attacker here can write the bucket (not the S3 server): they overwrite a
released blob with other bytes of the same size, keeping its metadata, or even
sending the original SHA-256 as the object's checksum (moto keeps such a value;
AWS would refuse it). Promotion and rollback must refuse, exit 3, and leave the
pointer and the audit log as they were.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from boto3.s3.transfer import TransferConfig

from pipeline.digest import canonical_json, sha256_bytes
from pipeline.release.manifest import BlobSource, publish_release, utc_now
from pipeline.release.manifest_record import Manifest
from pipeline.release.pointer_event import PointerAction
from pipeline.release.pointers import move_pointer
from pipeline.release.store.s3 import S3Store
from pipeline.release.store.s3_checksum import b64
from pipeline.servers.ports import free_ports
from tests.support.cli import cli
from tests.support.moto_s3 import S3Server
from tests.support.policy import POLICY, approver_keys, creator_actor
from tests.support.recorded import recorded as recorded_gates

pytestmark = pytest.mark.integration

NAME = "fraud-mlp"
MULTIPART = 64 * 2**20          # the threshold: uploaded in 8 parts of 8 MiB


def s3_project(project: Path, s3_server: S3Server, policy: str | None = None) -> S3Store:
    bucket = s3_server.new_bucket()
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text().replace("store: file://.serve-pipeline/store",
                                             f"store: s3://{bucket}/ml"))
    if policy is not None:
        (project / "environments" / "production.yaml").write_text(policy)
    return S3Store(f"s3://{bucket}/ml", endpoint_url=s3_server.endpoint)


def release_of(store: S3Store, path: Path, creator: str = "alice@build-host",
               actor: dict[str, Any] | None = None) -> str:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    body = {"run_id": path.name, "created_by": creator,
            "created_by_actor": actor or {"user": creator, "via": "local"}, **recorded_gates()}
    verification = canonical_json({"run_id": path.name, "stages": []})
    sources = [BlobSource("model", path, None, digest),
               BlobSource("verification", None, verification, sha256_bytes(verification))]
    return publish_release(store, NAME, sources, Manifest.from_json(body), utc_now()).release_id


def blob_key(store: S3Store, path: Path) -> str:
    return f"ml/blobs/sha256/{hashlib.sha256(path.read_bytes()).hexdigest()}"


def audit_keys(s3: object, bucket: str) -> list[str]:
    """The audit log's entries (approvals and moves; a move's intent, written before its
    swap, left out)."""
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="ml/audit/")  # type: ignore[attr-defined]
    return sorted(o["Key"] for o in listed.get("Contents", []) if "-intent-" not in o["Key"])


def history(project: Path, environment: str, env: dict[str, str]) -> dict[str, object]:
    shown = cli(["history", environment, "--format", "json"], project, env=env)
    assert shown.returncode == 0, shown.stderr
    body: dict[str, object] = json.loads(shown.stdout)
    return body


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    made = {}
    for name, size in (("big.bin", MULTIPART), ("small.bin", 2**20), ("other.bin", 2**20)):
        made[name] = tmp_path / name
        made[name].write_bytes(os.urandom(size))
    return made


def test_tampered_blobs_are_refused_by_promote_and_rollback(
        project: Path, s3_env: S3Server, files: dict[str, Path]) -> None:
    s3_server = s3_env
    store = s3_project(project, s3_server)
    env = s3_server.env
    big, small, other = (release_of(store, files[n]) for n in ("big.bin", "small.bin",
                                                                "other.bin"))
    manifest = json.loads(store.read(f"releases/{NAME}/{big}.json") or b"{}")
    recorded = manifest["blobs"][0]["stored"]["checksum_sha256"]
    assert recorded.endswith("-8") and manifest["blobs"][0]["stored"]["etag"].endswith('-8"')
    for release in (big, small, other):
        move_pointer(store, NAME, "staging", release, PointerAction.PROMOTE, "ci")
    s3 = s3_server.client()
    bucket = store.bucket
    before = audit_keys(s3, bucket)

    # 1. The found attack: other bytes of the same size, the metadata kept.
    key = blob_key(store, files["big.bin"])
    metadata = s3.head_object(Bucket=bucket, Key=key)["Metadata"]
    s3.put_object(Bucket=bucket, Key=key, Body=os.urandom(MULTIPART), Metadata=metadata)
    refused = cli(["promote", "production", "--release", big, "--approved-by", "rita"],
                  project, env=env)
    assert refused.returncode == 3, refused.stderr
    line = one_error_line(refused)
    assert f"release {big} cannot be promoted: model: blob " in line and "corrupt" in line

    # 2. Re-uploaded multipart with S3 checksums of its own (as `aws s3 cp` would do).
    fake = files["big.bin"].with_name("fake.bin")
    fake.write_bytes(os.urandom(MULTIPART))
    s3.upload_file(str(fake), bucket, key, ExtraArgs={"Metadata": metadata,
                                                      "ChecksumAlgorithm": "SHA256"},
                   Config=TransferConfig(multipart_threshold=8 * 2**20,
                                         multipart_chunksize=8 * 2**20))
    refused = cli(["promote", "production", "--release", big, "--approved-by", "rita"],
                  project, env=env)
    assert refused.returncode == 3, refused.stderr
    line = one_error_line(refused)
    assert "is not the one published (S3 SHA-256 checksum" in line and recorded in line

    # 3. Single-part, with the original SHA-256 sent as the object's checksum (moto keeps it).
    small_key = blob_key(store, files["small.bin"])
    digest = small_key.rsplit("/", 1)[1]
    s3.put_object(Bucket=bucket, Key=small_key, Body=os.urandom(2**20), Metadata={
        "sha256": digest}, ChecksumAlgorithm="SHA256", ChecksumSHA256=b64(digest))
    refused = cli(["promote", "production", "--release", small, "--approved-by", "rita"],
                  project, env=env)
    assert refused.returncode == 3
    assert "corrupt" in one_error_line(refused)

    # Rollback: staging is at `other`; the one before (`small`) and `big` are tampered.
    for target in ([], ["--to", big]):
        back = cli(["rollback", "staging", *target], project, env=env)
        assert back.returncode == 3, back.stderr
        assert "cannot be rolled back to: model: blob" in one_error_line(back)

    assert history(project, "production", env)["current"] is None
    assert history(project, "staging", env)["current"] == other
    assert audit_keys(s3, bucket) == before           # no approval, no event was written


def test_signed_approvals_and_acting_identity_on_s3(project: Path, s3_env: S3Server,
                                                    files: dict[str, Path]) -> None:
    s3_server = s3_env
    approver_keys(project)
    store = s3_project(project, s3_server, POLICY)
    first = release_of(store, files["small.bin"], actor=creator_actor("alice"))
    second = release_of(store, files["other.bin"], actor=creator_actor("alice"))
    for release in (first, second):
        move_pointer(store, NAME, "staging", release, PointerAction.PROMOTE, "ci")
    s3 = s3_server.client()
    before = audit_keys(s3, store.bucket)

    def approve(release: str, key: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return cli(["approve", release, "--env", "production", "--key",
                    str(project / "keys" / f"{key}.pem"), "--yes"], project, env=env)

    refused = approve(first, "alice", s3_server.env)
    assert refused.returncode == 5, refused.stderr
    assert "created by the same verified identity (github:alice)" in one_error_line(refused)
    assert audit_keys(s3, store.bucket) == before

    # GITHUB_* variables without a token: a claim, recorded as one; STS is verified.
    github = {**s3_server.env, "GITHUB_ACTIONS": "true", "GITHUB_ACTOR": "deploy-bot",
              "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "acme/fraud",
              "GITHUB_RUN_ID": "42", "AWS_ENDPOINT_URL_STS": s3_server.endpoint}
    assert approve(first, "rita", github).returncode == 0
    moved = cli(["promote", "production", "--release", first], project, env=github)
    assert moved.returncode == 0, moved.stderr
    event = history(project, "production", github)["events"][0]  # type: ignore[index]
    assert event["approved_by"] == ["rita"] and event["by"] == "deploy-bot"
    actor = event["actor"]
    assert actor["via"] == "local" and actor["verified"] is False
    assert "run_url" not in actor
    assert actor["claimed"] == {"actor": "deploy-bot", "repository": "acme/fraud",
                                "run_id": "42"}
    assert actor["aws_caller"] == {"arn": "arn:aws:sts::123456789012:user/moto",
                                   "account": "123456789012",
                                   "user_id": "AKIAIOSFODNN7EXAMPLE", "verified": True}
    written = [k for k in audit_keys(s3, store.bucket) if k not in before]
    assert len(written) == 2 and "-approve-production-" in written[0] and \
        "-promote-production-" in written[1]
    audited = json.loads(s3.get_object(Bucket=store.bucket, Key=written[1])["Body"].read())
    assert audited["actor"] == event["actor"] and audited["approved_by"] == ["rita"]

    closed = free_ports(1)[0]          # nothing listens there: STS does not answer
    offline = {**s3_server.env, "AWS_ENDPOINT_URL_STS": f"http://127.0.0.1:{closed}"}
    back = cli(["rollback", "staging"], project, env=offline)
    assert back.returncode == 0, back.stderr
    event = history(project, "staging", offline)["events"][-1]  # type: ignore[index]
    assert event["action"] == "rollback" and event["actor"]["user"].count("@") == 1
    assert event["actor"]["aws_caller"]["unavailable"].startswith("STS GetCallerIdentity")
