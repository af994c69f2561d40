"""The whole pipeline against a real tritonserver: promote, rollback, history, failures."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from pipeline.digest import sha256_file
from pipeline.servers.ports import port_is_bound
from tests.support.cli import cli, latest_record, stage_details, start_cli, wait_for_stage
from tests.support.policy import RITA_APPROVES, approver_keys
from tests.support.specs import fast_spec

pytestmark = pytest.mark.integration

RELEASE = re.compile(r"^release (\S+)$", re.M)


def test_promote_twice_rollback_and_history(fast_project: Path,
                                            no_leftovers: Callable[[], None]) -> None:
    first = cli(["promote", "staging"], fast_project)
    assert first.returncode == 0, first.stdout + first.stderr
    first_id = RELEASE.findall(first.stdout)[-1]
    record = latest_record(fast_project)
    assert [s["status"] for s in record["stages"]] == \
        ["passed"] * 5 + ["skipped", "passed", "skipped", "passed"]  # no replay, no regression
    gates = [g for s in record["stages"] for g in s["gates"]]
    assert {g["name"] for g in gates} >= {"latency.p99", "latency.error_rate",
                                          "parity.mismatched_elements",
                                          "failure.wrong_dtype", "failure.unknown_model"}
    # The fast spec accepts an unknown capacity (its 2 s search may confirm no rate) and an
    # undecided latency gate within its threshold (see tests/support/specs.py); every other
    # gate passed.
    accepted = [g for g in gates if g["name"] == "saturation.capacity_rps"
                or g["name"].startswith("latency.")]
    assert all(g["passed"] for g in gates if g not in accepted)
    assert all(g["outcome"] in ("passed", "inconclusive") for g in accepted)
    latency = next(s for s in record["stages"] if s["name"] == "latency")["metrics"]
    assert latency["requests"] > 0 and latency["p99_ms"] > 0
    assert latency["server_rss_mb"] > 100
    assert latency["server_requests"] > 0
    assert record["server"]["exit"] == "exited with code 0"
    assert (fast_project / ".serve-pipeline" / "runs" / record["run_id"] / "server.log").is_file()
    no_leftovers()

    second = cli(["promote", "staging"], fast_project)
    assert second.returncode == 0, second.stdout + second.stderr
    second_id = RELEASE.findall(second.stdout)[-1]
    assert second_id != first_id
    assert "already present" in second.stdout

    back = cli(["rollback", "staging"], fast_project)
    assert back.returncode == 0, back.stderr
    history = cli(["history", "staging", "--format", "json"], fast_project)
    body = json.loads(history.stdout)
    assert body["current"] == first_id
    assert [(e["action"], e["release_id"], e["previous_release_id"]) for e in body["events"]] \
        == [("promote", first_id, None), ("promote", second_id, first_id),
            ("rollback", first_id, second_id)]
    shown = cli(["report", first_id, "--format", "json"], fast_project)
    assert json.loads(shown.stdout)["release_id"] == first_id
    # The fast spec's own gates (its capacity may be inconclusive), rita's key trusted.
    keys = approver_keys(fast_project)
    (fast_project / "environments" / "production.yaml").write_text(RITA_APPROVES)
    refused = cli(["promote", "production"], fast_project)
    assert refused.returncode == 5 and "needs a signed approval" in refused.stderr
    assert json.loads(cli(["history", "production", "--format", "json"],
                          fast_project).stdout)["current"] is None
    signed = cli(["approve", first_id, "--env", "production", "--key", str(keys["rita"]),
                  "--yes"], fast_project)
    assert signed.returncode == 0, signed.stderr
    approved = cli(["promote", "production"], fast_project)
    assert approved.returncode == 0, approved.stderr
    production = json.loads(cli(["history", "production", "--format", "json"],
                                fast_project).stdout)
    assert production["current"] == first_id
    assert production["events"][0]["approved_by"] == ["rita"]
    # The release live in production, as Triton loads it: the published repository.
    served = fast_project / "served"
    wrote = cli(["materialize", "production", "--to", str(served)], fast_project)
    assert wrote.returncode == 0, wrote.stderr
    manifest = json.loads((fast_project / ".serve-pipeline" / "store" / "releases" /
                           "fraud-mlp" / f"{first_id}.json").read_text())
    config = next(b for b in manifest["blobs"] if b["role"] == "config.pbtxt")
    assert sha256_file(served / "fraud-mlp" / "config.pbtxt") == config["digest"]
    assert (served / "fraud-mlp" / "1" / "model.pt").is_file()
    again = cli(["materialize", first_id, "--to", str(served)], fast_project)
    assert again.returncode == 0 and "already there" in again.stdout, again.stderr
    unpinned = cli(["export", "kserve", "production", "--storage-uri", "s3://m/x"],
                   fast_project)
    assert unpinned.returncode == 2
    assert unpinned.stderr.strip().splitlines() == [
        f"error: release {first_id} of 'fraud-mlp': it has no pushed serving image, not "
        "pinned by digest (publish pushes one when server.image sets a base and a "
        "repository)"]
    rendered = cli(["report", record["run_id"]], fast_project)
    assert rendered.returncode == 0
    for heading in ("Stages", "Gates", "latency.p99", "Where requests waited",
                    "Saturation probes", "server shutdown"):
        assert heading in rendered.stdout, heading
    no_leftovers()


@contextmanager
def promoting_until_latency(
        project: Path) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    """`promote staging` yielded once the latency stage runs, with the start stage's
    details (pid, ports); killed on exit if it still runs. The stage begins with a 60 s
    warm-up: a fixed window that no verdict ends early, so the stage is still running
    when the test acts, however fast the windows after it would be decided."""
    spec = project / "serve.yaml"
    text = fast_spec(spec.read_text())
    assert text.count("warmup: 500ms") == 1
    spec.write_text(text.replace("warmup: 500ms", "warmup: 60s"))
    process = start_cli(["promote", "staging"], project)
    try:
        yield process, stage_details(wait_for_stage(project, "latency"), "start")
    finally:
        if process.poll() is None:
            # A test that gave up: let the run tear its server down before the last resort.
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def test_killing_triton_during_latency_fails_that_stage(fast_project: Path,
                                                       no_leftovers: Callable[[], None]) -> None:
    with promoting_until_latency(fast_project) as (process, started):
        os.kill(started["pid"], signal.SIGKILL)
        _, stderr = process.communicate(timeout=180)
    assert process.returncode == 1
    assert "Traceback" not in stderr
    record = latest_record(fast_project)
    statuses = {s["name"]: s for s in record["stages"]}
    assert statuses["latency"]["status"] == "failed"
    assert "killed by SIGKILL" in statuses["latency"]["message"]
    assert statuses["saturation"]["status"] == "aborted"
    assert statuses["publish"]["status"] == "aborted"
    assert record["release_id"] is None
    assert not list((fast_project / ".serve-pipeline" / "store").rglob("*.json"))
    no_leftovers()


def test_ctrl_c_tears_down_and_exits_130(fast_project: Path,
                                         no_leftovers: Callable[[], None]) -> None:
    with promoting_until_latency(fast_project) as (process, started):
        ports, pid = started["ports"], started["pid"]
        # Into the warm-up window (60 s), not at the step between two stages: the
        # interrupt must stop a running load generator, too.
        time.sleep(3)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=180)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not any(port_is_bound(port) for port in ports.values())
    record = latest_record(fast_project)
    assert record["interrupted"] is True and record["status"] == "failed"
    assert record["release_id"] is None
    statuses = {s["name"]: s for s in record["stages"]}
    assert statuses["latency"]["status"] == "failed"
    assert "interrupted" in statuses["latency"]["message"]
    assert [statuses[name]["status"] for name in ("saturation", "publish")] == ["aborted"] * 2
    no_leftovers()


def test_a_failed_parity_gate_aborts_the_rest(fast_project: Path,
                                              no_leftovers: Callable[[], None]) -> None:
    """A model that is not deterministic differs from its own reference."""
    (fast_project / "noisy.py").write_text(
        "import torch\n\n\n"
        "class Noisy(torch.nn.Module):\n"
        "    def __init__(self) -> None:\n"
        "        super().__init__()\n"
        "        self.linear = torch.nn.Linear(16, 4)\n\n"
        "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
        "        return self.linear(x) + torch.rand(x.shape[0], 4)\n\n\n"
        "def build() -> torch.nn.Module:\n"
        "    return Noisy()\n")
    import torch

    linear = torch.nn.Linear(16, 4).state_dict()
    torch.save({f"linear.{key}": value for key, value in linear.items()},
               fast_project / "noisy.pt")
    spec = fast_project / "serve.yaml"
    spec.write_text(spec.read_text().replace(
        "source: examples/mlp/model.pt", "source: noisy.pt").replace(
        "format: torchscript", "format: eager\n  entrypoint: noisy.py:build"))
    result = cli(["promote", "staging"], fast_project)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "parity" in result.stderr
    record = latest_record(fast_project)
    statuses = [(s["name"], s["status"]) for s in record["stages"]]
    assert statuses[3] == ("parity", "failed")
    assert [status for _, status in statuses[4:]] == ["aborted"] * 5
    no_leftovers()


@pytest.mark.parametrize("variant", ["onnx", "eager"])
def test_other_model_formats_serve_with_parity(fast_project: Path, variant: str,
                                               no_leftovers: Callable[[], None]) -> None:
    spec = fast_project / "serve.yaml"
    text = spec.read_text()
    if variant == "onnx":
        text = text.replace("source: examples/mlp/model.pt", "source: examples/mlp/model.onnx")
        text = text.replace("format: torchscript", "format: onnx")
    else:
        text = text.replace("source: examples/mlp/model.pt", "source: examples/mlp/weights.pt")
        text = text.replace("format: torchscript",
                            "format: eager\n  entrypoint: examples/mlp/net.py:build")
    spec.write_text(text.replace("saturation: {max_concurrency: 4",
                                 "saturation: {enabled: false, max_concurrency: 4"))
    result = cli(["run"], fast_project)
    assert result.returncode == 0, result.stdout + result.stderr
    record = latest_record(fast_project)
    parity = next(s for s in record["stages"] if s["name"] == "parity")
    assert parity["metrics"]["parity_mismatched"] == 0
    assert parity["metrics"]["parity_elements"] > 100
    assert record["promoted_to"] is None
    no_leftovers()


def test_production_reverifies_the_staging_artifact_under_its_own_gates(
        fast_project: Path, no_leftovers: Callable[[], None]) -> None:
    staged = cli(["promote", "staging"], fast_project)
    assert staged.returncode == 0, staged.stdout + staged.stderr
    release = RELEASE.findall(staged.stdout)[-1]
    overlay = fast_project / "environments" / "production.yaml"
    keys = approver_keys(fast_project)
    overlay.write_text(RITA_APPROVES)
    signed = cli(["approve", release, "--env", "production", "--key", str(keys["rita"]),
                  "--yes"], fast_project)
    assert signed.returncode == 0, signed.stderr
    overlay.write_text(RITA_APPROVES + "reverify: true\nslo: {p99: 45ms}\n"
                       "server: {instances: 2}\n")
    changed = cli(["promote", "production"], fast_project)
    assert changed.returncode == 1
    assert "does not match this environment's spec" in changed.stderr
    assert "never rebuilds" in changed.stderr

    overlay.write_text(RITA_APPROVES + "reverify: true\nslo: {p99: 45ms}\n")
    promoted = cli(["promote", "production"], fast_project)
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    record = latest_record(fast_project)
    assert record["release_id"] == release and record["promoted_to"] == "production"
    assert [s["status"] for s in record["stages"]] == \
        ["passed"] * 5 + ["skipped", "passed", "skipped", "passed"]  # no replay, no regression
    gates = {g["name"]: g for s in record["stages"] for g in s["gates"]}
    assert gates["latency.p99"]["threshold"] == 45.0
    history = json.loads(cli(["history", "production", "--format", "json"],
                             fast_project).stdout)
    assert history["current"] == release and history["events"][0]["approved_by"] == ["rita"]
    releases = list((fast_project / ".serve-pipeline" / "store" / "releases").rglob("*.json"))
    assert len(releases) == 1
    no_leftovers()
