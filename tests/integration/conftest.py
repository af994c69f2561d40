"""Integration fixtures: a fast variant of the example and helpers to run the real CLI."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

# A short capacity search: on a busy 2-core machine 2 s may confirm no rate, and these
# tests are not about capacity (test_capacity.py is), so an unknown capacity is accepted.
FAST_STAGES = """
stages:
  readiness: {timeout: 90s}
  parity: {data: examples/mlp/samples.npz, atol: 1e-5, rtol: 1e-4}
  failure: {}
  latency: {concurrency: 4, warmup: 500ms, duration: LATENCY_DURATION,
            stability: {windows: 2, max_windows: 2}}
  saturation: {max_concurrency: 4, probe_duration: 500ms, capacity: {budget: 2s, step: 250ms,
                                                           accept_inconclusive: true},
               burst: {rate: 100/s, duration: 500ms, settle: 250ms}}
"""


def fast_spec(example: str, latency_duration: str = "2s", instances: int = 1) -> str:
    head, _, tail = example.partition("\nstages:\n")
    _, _, publish = tail.partition("\npublish:\n")
    head = head.replace("instances: 2", f"instances: {instances}")
    stages = FAST_STAGES.replace("LATENCY_DURATION", latency_duration)
    return head + "\n" + stages + "\npublish:\n" + publish


@pytest.fixture
def fast_project(project: Path) -> Path:
    spec = project / "serve.yaml"
    spec.write_text(fast_spec(spec.read_text()))
    return project


def cli(args: list[str], cwd: Path, timeout: float = 300,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=timeout, env=env or dict(os.environ))


def start_cli(args: list[str], cwd: Path,
              env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "pipeline", *args], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env or dict(os.environ))


def latest_record(project: Path) -> dict[str, Any]:
    # The record written last: run ids have one-second resolution, and a refused run and
    # the next one can start within the same second.
    runs = sorted((project / ".serve-pipeline" / "runs").glob("*/record.json"),
                  key=lambda path: path.stat().st_mtime_ns)
    assert runs, "no run record"
    body: dict[str, Any] = json.loads(runs[-1].read_text())
    return body


def wait_for_stage(project: Path, stage: str, timeout: float = 120) -> dict[str, Any]:
    """Wait until the record shows every stage before `stage` finished (so it runs now)."""
    order = ["build", "start", "readiness", "parity", "latency", "saturation", "publish"]
    needed = order[: order.index(stage)]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            record = latest_record(project)
        except (AssertionError, ValueError):
            time.sleep(0.2)
            continue
        done = [s["name"] for s in record["stages"]]
        if any(s["status"] != "passed" for s in record["stages"]):
            raise AssertionError(f"a stage failed before {stage}: {record['stages']}")
        if done[: len(needed)] == needed:
            return record
        time.sleep(0.2)
    raise AssertionError(f"stage {stage} did not start within {timeout}s")


def servers_under(folder: Path) -> list[psutil.Process]:
    """tritonserver (and python stub) processes serving anything under `folder`."""
    found = []
    for process in psutil.process_iter(["cmdline", "cwd"]):
        try:
            text = " ".join(process.info["cmdline"] or []) + " " + (process.info["cwd"] or "")
        except (psutil.Error, TypeError):
            continue
        if str(folder) in text and ("tritonserver" in text or "triton_python" in text):
            found.append(process)
    return found


@pytest.fixture
def no_leftovers(fast_project: Path) -> Callable[[], None]:
    def check() -> None:
        deadline = time.monotonic() + 10
        while servers_under(fast_project) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert servers_under(fast_project) == []

    return check


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


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3-compatible HTTP server (moto in server mode) on a free loopback port."""
    from pipeline.servers.ports import free_ports

    port = free_ports(1)[0]
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    binary = Path(sys.executable).parent / "moto_server"
    with log.open("wb") as output:
        server = subprocess.Popen([str(binary), "-H", "127.0.0.1", "-p", str(port)],
                                  stdout=output, stderr=subprocess.STDOUT)
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
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_S3": endpoint}
        env.pop("AWS_PROFILE", None)
        yield S3Server(endpoint, env)
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The test process itself talks to the moto server through the standard variables."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
                "AWS_ENDPOINT_URL_S3"):
        monkeypatch.setenv(key, s3_server.env[key])
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return s3_server
