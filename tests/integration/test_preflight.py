"""Preflight against real components: each broken setup fails in seconds, with one line per
problem and the exit code of its kind, before any server starts or anything is written."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from pipeline.servers.ports import free_ports
from tests.support.cli import cli
from tests.support.moto_s3 import S3Server
from tests.support.processes import TRITON, processes_under

LIMIT_S = 10


def s3_spec(project: Path, store: str, endpoint: str) -> None:
    spec = project / "serve.yaml"
    head, found, _ = spec.read_text().partition("\npublish:\n")
    assert found
    spec.write_text(f"{head}\npublish:\n  store: {store}\n  endpoint_url: {endpoint}\n")


def refused(project: Path, args: list[str], env: dict[str, str] | None = None,
            ) -> tuple[int, list[str]]:
    """Run the CLI; the exit code and the preflight lines. Asserts the time limit and that
    nothing started or was written locally."""
    started = time.monotonic()
    result = cli(args, project, timeout=60, env=env)
    elapsed = time.monotonic() - started
    assert elapsed < LIMIT_S, f"preflight took {elapsed:.1f} s: {result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: preflight:")]
    runs = project / ".serve-pipeline" / "runs"
    assert not runs.exists() or list(runs.iterdir()) == []
    assert not (project / ".serve-pipeline" / "store").exists()
    assert processes_under(project, TRITON) == []
    return result.returncode, lines


def keys(s3: Any, bucket: str) -> list[str]:
    return [item["Key"] for item in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def test_a_store_that_is_not_running(project: Path) -> None:
    dead = f"http://127.0.0.1:{free_ports(1)[0]}"
    s3_spec(project, "s3://nobucket/x", dead)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b",
           "AWS_DEFAULT_REGION": "us-east-1"}
    code, lines = refused(project, ["promote", "staging"], env)
    assert code == 3
    assert lines == [f"error: preflight: store: s3://nobucket/x: cannot connect to {dead}: "
                     "start the store, or fix publish.endpoint_url / AWS_ENDPOINT_URL_S3"]


def test_a_bucket_that_does_not_exist(project: Path, s3_server: S3Server) -> None:
    s3_spec(project, "s3://no-such-bucket/releases", s3_server.endpoint)
    code, lines = refused(project, ["promote", "staging"], s3_server.env)
    assert code == 3
    assert len(lines) == 1 and "bucket no-such-bucket does not exist" in lines[0]
    assert "create it, or fix publish.store" in lines[0]


def test_every_problem_at_once_with_the_most_serious_code(project: Path,
                                                          s3_server: S3Server) -> None:
    s3_spec(project, "s3://no-such-bucket/releases", s3_server.endpoint)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        spec = project / "serve.yaml"
        spec.write_text(spec.read_text().replace("  ports: {}", f"  ports: {{http: {port}}}"))
        assert f"http: {port}" in spec.read_text()
        code, lines = refused(project, ["run", "--env", "staging"], s3_server.env)
    assert code == 2   # a setup that cannot run outranks the store
    assert len(lines) == 2
    assert "store: " in lines[0] and "does not exist" in lines[0]
    assert lines[1] == (f"error: preflight: ports: {ports_line(spec)}: server.ports.http: port "
                        f"{port} on 127.0.0.1 is already in use by process {os.getpid()} "
                        f"({psutil.Process().name()}): stop it, or set another port there")


# ------------------------------------------------------------ credentials (moto + IAM)


@dataclass(frozen=True)
class AuthS3:
    endpoint: str
    bucket: str
    admin: dict[str, str]
    read_only: dict[str, str]

    def client(self, keys: dict[str, str]) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=keys["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=keys["AWS_SECRET_ACCESS_KEY"])

    def env(self, keys: dict[str, str]) -> dict[str, str]:
        env = {**os.environ, **keys, "AWS_DEFAULT_REGION": "us-east-1"}
        env.pop("AWS_PROFILE", None)
        env.pop("AWS_ENDPOINT_URL_S3", None)
        return env


ALLOW_ALL = {"Version": "2012-10-17",
             "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
# The unauthenticated actions the fixture spends before moto enforces IAM.
SETUP_ACTIONS = 4


@pytest.fixture(scope="module")
def auth_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthS3]:
    """moto in server mode enforcing IAM (after INITIAL_NO_AUTH_ACTION_COUNT actions): an
    admin, and a user who may read everywhere but write only under `other/`."""
    import boto3

    port = free_ports(1)[0]
    log = tmp_path_factory.mktemp("moto-auth") / "moto.log"
    with log.open("wb") as output:
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p",
             str(port)], stdout=output, stderr=subprocess.STDOUT,
            env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_ACTIONS)})
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(endpoint + "/moto-api/", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("moto_server did not start: " + log.read_text()) from None
                time.sleep(0.2)
        anyone: dict[str, Any] = {"endpoint_url": endpoint, "region_name": "us-east-1",
                  "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
        bucket = "preflight-auth"
        boto3.client("s3", **anyone).create_bucket(Bucket=bucket)
        iam = boto3.client("iam", **anyone)
        iam.create_user(UserName="admin")
        iam.put_user_policy(UserName="admin", PolicyName="all",
                            PolicyDocument=json.dumps(ALLOW_ALL))
        admin = as_env(iam.create_access_key(UserName="admin")["AccessKey"])
        iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1",
                           aws_access_key_id=admin["AWS_ACCESS_KEY_ID"],
                           aws_secret_access_key=admin["AWS_SECRET_ACCESS_KEY"])
        iam.create_user(UserName="reader")
        iam.put_user_policy(UserName="reader", PolicyName="read-only-releases",
                            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [
                                {"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"],
                                 "Resource": "*"},
                                {"Effect": "Allow", "Action": "s3:PutObject",
                                 "Resource": f"arn:aws:s3:::{bucket}/other/*"}]}))
        reader = as_env(iam.create_access_key(UserName="reader")["AccessKey"])
        yield AuthS3(endpoint, bucket, admin, reader)
    finally:
        server.terminate()
        server.wait(timeout=10)


def as_env(key: dict[str, Any]) -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": str(key["AccessKeyId"]),
            "AWS_SECRET_ACCESS_KEY": str(key["SecretAccessKey"])}


def test_the_good_credentials_pass_and_write_nothing(project: Path, auth_s3: AuthS3) -> None:
    s3_spec(project, f"s3://{auth_s3.bucket}/releases", auth_s3.endpoint)
    admin = auth_s3.client(auth_s3.admin)
    before = keys(admin, auth_s3.bucket)
    result = cli(["doctor", "--env", "staging", "--format", "json"], project,
                 env=auth_s3.env(auth_s3.admin), timeout=60)
    body = json.loads(result.stdout)
    assert result.returncode == 0, body
    statuses = {check["name"]: check["status"] for check in body["checks"]}
    assert statuses["store"] == "ok" and statuses["store.pointer"] == "ok"
    assert keys(admin, auth_s3.bucket) == before


def test_wrong_credentials(project: Path, auth_s3: AuthS3) -> None:
    s3_spec(project, f"s3://{auth_s3.bucket}/releases", auth_s3.endpoint)
    wrong = {"AWS_ACCESS_KEY_ID": "AKIAWRONGWRONGWRONG0", "AWS_SECRET_ACCESS_KEY": "nope"}
    code, lines = refused(project, ["promote", "staging"], auth_s3.env(wrong))
    assert code == 3
    assert lines == [f"error: preflight: store: s3://{auth_s3.bucket}/releases: the credentials "
                     "were refused (InvalidAccessKeyId): fix AWS_ACCESS_KEY_ID / "
                     "AWS_SECRET_ACCESS_KEY (or the profile or role)"]


def test_a_read_only_prefix(project: Path, auth_s3: AuthS3) -> None:
    s3_spec(project, f"s3://{auth_s3.bucket}/releases", auth_s3.endpoint)
    admin = auth_s3.client(auth_s3.admin)
    before = keys(admin, auth_s3.bucket)
    code, lines = refused(project, ["promote", "staging"], auth_s3.env(auth_s3.read_only))
    assert code == 3
    assert lines == [f"error: preflight: store: s3://{auth_s3.bucket}/releases: the "
                     f"credentials may not write under s3://{auth_s3.bucket}/releases/ "
                     f"(AccessDenied): grant s3:PutObject on arn:aws:s3:::{auth_s3.bucket}/"
                     "releases/*"]
    assert keys(admin, auth_s3.bucket) == before
    # The same user may write where its policy lets it: the probe is about the prefix.
    s3_spec(project, f"s3://{auth_s3.bucket}/other", auth_s3.endpoint)
    fine = cli(["doctor"], project, env=auth_s3.env(auth_s3.read_only), timeout=60)
    assert fine.returncode == 0, fine.stdout
    assert keys(admin, auth_s3.bucket) == before


# ------------------------------------------------------------ the machine


def test_torchserve_without_java(project: Path, tmp_path: Path) -> None:
    spec = project / "examples" / "torchserve" / "serve.yaml"
    bare = tmp_path / "bin"
    bare.mkdir()
    git = shutil.which("git")
    if git:
        (bare / "git").symlink_to(git)
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(bare)
    code, lines = refused(project, ["promote", "staging", "-f", str(spec)], env)
    assert code == 2
    assert len(lines) == 1
    assert lines[0].startswith("error: preflight: server.java: java not found on PATH: "
                               "TorchServe needs Java 17+")
    assert not (project / "examples" / "torchserve" / ".serve-pipeline" / "runs").exists() or \
        list((project / "examples" / "torchserve" / ".serve-pipeline" / "runs").iterdir()) == []


def test_a_busy_fixed_port(project: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        spec = project / "serve.yaml"
        spec.write_text(spec.read_text().replace("  ports: {}", f"  ports: {{metrics: {port}}}"))
        code, lines = refused(project, ["promote", "staging"])
    assert code == 2
    assert lines == [f"error: preflight: ports: {ports_line(spec)}: server.ports.metrics: "
                     f"port {port} on 127.0.0.1 is already in use by process {os.getpid()} "
                     f"({psutil.Process().name()}): stop it, or set another port there"]


def ports_line(spec: Path) -> str:
    """`serve.yaml:N`, where the spec's `ports:` line is."""
    number = next(n for n, line in enumerate(spec.read_text().splitlines(), 1)
                  if line.startswith("  ports:"))
    return f"{spec.name}:{number}"


def test_a_missing_dvc_rev(project: Path, tmp_path: Path) -> None:
    repo = tmp_path / "models-repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x.invalid"}
    for argv in (["git", "init", "-q"], [str(Path(sys.executable).parent / "dvc"), "init", "-q"],
                 ["git", "commit", "-qm", "init"]):
        subprocess.run(argv, cwd=repo, env=env, check=True, capture_output=True, timeout=120)
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text().replace(
        "source: examples/mlp/model.pt",
        f"source: {{dvc: {{path: model.pt, repo: {repo}, rev: v9.9}}}}"))
    code, lines = refused(project, ["promote", "staging"])
    assert code == 2
    assert len(lines) == 1
    assert lines[0].startswith(f"error: preflight: model.source: model.source.dvc: cannot "
                               f"resolve model.pt@v9.9 in {repo}: ")


def test_doctor_on_the_example(project: Path) -> None:
    table = cli(["doctor"], project, timeout=60)
    assert table.returncode == 0, table.stdout + table.stderr
    for name in ("store", "server.binary", "server.libpython", "model.source", "disk"):
        assert name in table.stdout
    assert "0 problem(s)" in table.stdout
    production = cli(["doctor", "--env", "production", "--format", "json"], project, timeout=60)
    body = json.loads(production.stdout)
    assert production.returncode == 5 and body["exit_code"] == 5
    release = next(c for c in body["checks"] if c["name"] == "store.release")
    assert release["status"] == "failed" and "staging has no release yet" in release["detail"]
    assert not (project / ".serve-pipeline").exists()
