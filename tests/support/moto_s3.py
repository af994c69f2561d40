"""An S3-compatible HTTP server for tests and benchmarks: moto in server mode on a free
loopback port."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pipeline.servers.ports import free_ports

START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    env: dict[str, str]

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def new_bucket(self) -> str:
        name = f"releases-{secrets.token_hex(4)}"
        self.client().create_bucket(Bucket=name)
        return name


def s3_environment(endpoint: str) -> dict[str, str]:
    """This process's environment with moto's credentials and endpoint (no profile)."""
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_S3": endpoint}
    env.pop("AWS_PROFILE", None)
    return env


@contextmanager
def moto_server(log: Path | None = None) -> Iterator[S3Server]:
    """Start moto_server (from this interpreter's environment), wait until it answers,
    stop it on exit. Its output goes to `log` when given."""
    port = free_ports(1)[0]
    binary = Path(sys.executable).parent / "moto_server"
    output: IO[bytes] | int = log.open("wb") if log else subprocess.DEVNULL
    try:
        server = subprocess.Popen([str(binary), "-H", "127.0.0.1", "-p", str(port)],
                                  stdout=output, stderr=subprocess.STDOUT)
    finally:
        if not isinstance(output, int):
            output.close()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(endpoint, server, log)
        yield S3Server(endpoint, s3_environment(endpoint))
    finally:
        server.terminate()
        server.wait(timeout=10)


def _wait_until_up(endpoint: str, server: subprocess.Popen[bytes], log: Path | None) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            with urllib.request.urlopen(endpoint + "/moto-api/", timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                said = log.read_text() if log else "(output not kept)"
                raise RuntimeError(f"moto_server did not start: {said}") from None
            time.sleep(0.2)
