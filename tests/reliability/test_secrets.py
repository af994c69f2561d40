"""Planted secrets never show up in logs, records, reports, the store or error messages."""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

import pytest

from tests.reliability.conftest import Tally
from tests.support.cli import start_cli
from tests.support.moto_s3 import S3Server
from tests.support.specs import quick_torchserve_spec

pytestmark = [pytest.mark.integration, pytest.mark.reliability]


def test_no_secret_leaves_the_process(project: Path, s3_server: S3Server, tally: Tally) -> None:
    bucket = s3_server.new_bucket()
    folder = project / "examples" / "torchserve"
    (folder / "serve.yaml").write_text(quick_torchserve_spec(publish=f"  store: s3://{bucket}/rel\n"))
    planted_secret = "S3cr3t-" + secrets.token_hex(16)
    planted_key_id = "AKIA" + secrets.token_hex(8).upper()
    # moto accepts any credentials; these are the values that must not leak.
    env = {**s3_server.env, "AWS_SECRET_ACCESS_KEY": planted_secret,
           "AWS_ACCESS_KEY_ID": planted_key_id}
    process = start_cli(["promote", "staging"], folder, env=env)
    keys: set[str] = set()
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:
        for key_file in (folder / ".serve-pipeline" / "runs").glob("*/torchserve/key_file.json"):
            try:
                body = json.loads(key_file.read_text())
                keys |= {str(body[api]["key"]) for api in ("inference", "management", "API")}
            except (OSError, ValueError, KeyError):
                pass
        time.sleep(0.2)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stdout + stderr
    assert keys, "the TorchServe keys were never seen"
    planted = {planted_secret, planted_key_id, *keys}
    outputs = {"stdout": stdout, "stderr": stderr}
    for path in (folder / ".serve-pipeline").rglob("*"):
        if path.is_file():
            outputs[str(path)] = path.read_bytes().decode("utf-8", errors="replace")
    client = s3_server.client()
    for item in client.list_objects_v2(Bucket=bucket).get("Contents", []):
        outputs[f"s3://{bucket}/{item['Key']}"] = client.get_object(
            Bucket=bucket, Key=item["Key"])["Body"].read().decode("utf-8", errors="replace")
    leaks = [(where, secret[:6]) for where, text in outputs.items() for secret in planted
             if secret in text]
    tally.add("secrets_leaked", len(leaks))
    assert leaks == [], leaks
    assert len(outputs) > 10            # logs, record, report, manifest, blobs were scanned
