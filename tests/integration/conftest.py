"""Integration fixtures: a fast variant of the example and helpers to run the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

FAST_STAGES = """
stages:
  readiness: {timeout: 90s}
  parity: {data: examples/mlp/samples.npz, atol: 1e-5, rtol: 1e-4}
  failure: {}
  latency: {concurrency: 4, warmup: 500ms, duration: LATENCY_DURATION}
  saturation: {max_concurrency: 4, probe_duration: 500ms, burst: {rate: 100/s, duration: 500ms}}
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


def start_cli(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "pipeline", *args], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def latest_record(project: Path) -> dict[str, Any]:
    runs = sorted((project / ".serve-pipeline" / "runs").glob("*/record.json"))
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
