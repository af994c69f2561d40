"""Promote, approve, promote to production and roll back with the store on the S3 API."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import cli
from tests.support.moto_s3 import S3Server
from tests.support.policy import RITA_APPROVES, approver_keys
from tests.support.specs import without_saturation

pytestmark = pytest.mark.integration


def test_release_lifecycle_on_s3(fast_project: Path, s3_server: S3Server) -> None:
    bucket = s3_server.new_bucket()
    spec = fast_project / "serve.yaml"
    # About the store: the release's measurements need not include a capacity search.
    spec.write_text(without_saturation(spec.read_text()).replace(
        "store: file://.serve-pipeline/store", f"store: s3://{bucket}/ml/fraud"))
    env = s3_server.env
    # The fast spec's gates (its capacity may be inconclusive), rita's key trusted.
    approvers = approver_keys(fast_project)
    # Production asks for the serving layout beside its releases (see the second release).
    (fast_project / "environments" / "production.yaml").write_text(
        RITA_APPROVES + "publish: {serving_layout: true}\n")

    def history(environment: str) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(cli(["history", environment, "--format", "json"],
                                               fast_project, env=env).stdout)
        return found

    first = cli(["promote", "staging"], fast_project, env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    release = re.findall(r"^release (\S+)$", first.stdout, re.M)[-1]
    keys = {o["Key"] for o in s3_server.client().list_objects_v2(Bucket=bucket)["Contents"]}
    assert f"ml/fraud/releases/fraud-mlp/{release}.json" in keys
    assert "ml/fraud/environments/fraud-mlp/staging.json" in keys
    # the five blobs a run published before, and the attestation
    assert sum(1 for k in keys if k.startswith("ml/fraud/blobs/sha256/")) == 6
    assert not any(k.startswith("ml/fraud/serving/") for k in keys)

    refused = cli(["promote", "production"], fast_project, env=env)
    assert refused.returncode == 5 and "needs a signed approval" in refused.stderr
    assert history("production") == {"environment": "production", "current": None,
                                     "events": []}

    approved = cli(["approve", release, "--env", "production", "--key", str(approvers["rita"]),
                    "--by", "rita", "--yes"], fast_project, env=env)
    assert approved.returncode == 0, approved.stderr
    moved = cli(["promote", "production"], fast_project, env=env)
    assert moved.returncode == 0, moved.stderr
    serving = f"s3://{bucket}/ml/fraud/serving/fraud-mlp/{release}"
    assert (f"note: release {release} was published without its serving layout "
            f"(`serve-pipeline materialize {release} --to {serving}` writes it there)") \
        in moved.stdout, moved.stdout
    production = history("production")
    assert production["current"] == release
    assert production["events"][0]["approved_by"] == ["rita"]

    # Staging now publishes the serving layout beside each release, for a storageUri.
    (fast_project / "environments" / "staging.yaml").write_text(
        "publish: {serving_layout: true}\n")
    second = cli(["promote", "staging"], fast_project, env=env)
    assert second.returncode == 0, second.stderr
    second_release = re.findall(r"^release (\S+)$", second.stdout, re.M)[-1]
    layout = f"ml/fraud/serving/fraud-mlp/{second_release}/"
    assert sorted(o["Key"].removeprefix(layout) for o in s3_server.client().list_objects_v2(
        Bucket=bucket, Prefix=layout)["Contents"]) == [
        "fraud-mlp/1/model.pt", "fraud-mlp/1/model.py", "fraud-mlp/1/model_runtime.py",
        "fraud-mlp/config.pbtxt"]
    assert f"serving layout (4 files, attested) at s3://{bucket}/{layout}".rstrip("/") \
        in second.stdout, second.stdout
    back = cli(["rollback", "staging"], fast_project, env=env)
    assert back.returncode == 0, back.stderr
    staging = history("staging")
    assert staging["current"] == release
    assert [e["action"] for e in staging["events"]] == ["promote", "promote", "rollback"]
    audit = [o["Key"] for o in s3_server.client().list_objects_v2(
        Bucket=bucket, Prefix="ml/fraud/audit/")["Contents"]]
    moves = [key for key in audit if "-intent-" not in key]
    assert len(moves) == 5   # promote, approve, promote (production), promote, rollback
    assert len(audit) - len(moves) == 4      # each move's intent, written before its swap
    checked = cli(["store", "verify", "--format", "json"], fast_project, env=env)
    assert checked.returncode == 0, checked.stdout
    assert json.loads(checked.stdout)["manifests"] == 2
    listed = json.loads(cli(["releases", "--format", "json"], fast_project, env=env).stdout)
    assert [r["current_in"] for r in listed] == [["production", "staging"], []]

    # `export kserve`'s default storageUri must hold the release: not yet, so refused.
    empty = cli(["export", "kserve", "production"], fast_project, env=env)
    assert empty.returncode == 2, empty.stdout + empty.stderr
    assert empty.stderr.strip() == (
        f"error: nothing is at {serving}, the default storageUri: publish the release with "
        f"publish.serving_layout, or `serve-pipeline materialize {release} --to {serving}` "
        "first, or give --storage-uri"), empty.stderr
    # Materialized beside the releases, where `export kserve` points storageUri by default.
    wrote = cli(["materialize", "production", "--to", serving], fast_project, env=env)
    assert wrote.returncode == 0, wrote.stderr
    assert "4 of 4 files written" in wrote.stdout
    listed_keys = {o["Key"] for o in s3_server.client().list_objects_v2(
        Bucket=bucket, Prefix="ml/fraud/serving/")["Contents"]}
    assert f"ml/fraud/serving/fraud-mlp/{release}/fraud-mlp/config.pbtxt" in listed_keys
    again = cli(["materialize", release, "--to", serving], fast_project, env=env)
    assert again.returncode == 0 and "already there (4 files)" in again.stdout, again.stderr
    # Now it is there; this release's image was never pushed, which is refused next.
    unpinned = cli(["export", "kserve", "production"], fast_project, env=env)
    assert unpinned.returncode == 2 and "not pinned by digest" in unpinned.stderr, \
        unpinned.stderr
    # What publish laid out is byte for byte what materialize would write.
    published = cli(["materialize", second_release, "--to", f"s3://{bucket}/{layout}"],
                    fast_project, env=env)
    assert published.returncode == 0 and "already there (4 files)" in published.stdout, \
        published.stdout + published.stderr
    elsewhere = cli(["materialize", "staging", "--to", f"s3://{bucket}/ml/fraud/releases"],
                    fast_project, env=env)
    assert elsewhere.returncode == 2 and "is not empty" in elsewhere.stderr
    missing = cli(["materialize", "production", "--to", "out", "--store",
                   "s3://no-such-bucket-here/ml"], fast_project, env=env)
    assert missing.returncode == 3 and not (fast_project / "out").exists()
    [line] = missing.stderr.strip().splitlines()
    assert line.startswith("error: store s3://no-such-bucket-here/ml: cannot read "), line
