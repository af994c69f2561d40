"""The real CLI as a process, and the run records it leaves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STAGE_ORDER = ("build", "start", "readiness", "parity", "latency", "replay", "saturation",
               "regression", "publish")


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
    needed = list(STAGE_ORDER[: STAGE_ORDER.index(stage)])
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


def stage_details(record: dict[str, Any], stage: str) -> dict[str, Any]:
    """The `details` a stage recorded (the start stage's pid and ports, say)."""
    details: dict[str, Any] = next(s for s in record["stages"] if s["name"] == stage)["details"]
    return details
