"""Two pipelines at once on one machine (different specs, same server kind) share nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline.servers.ports import free_ports
from tests.support.cli import start_cli
from tests.support.specs import fast_spec, quick_torchserve_spec

pytestmark = [pytest.mark.integration, pytest.mark.reliability]


def torchserve_project(project: Path, name: str) -> Path:
    # Next to examples/torchserve, so that ../mlp resolves as in the example.
    folder = project / "examples" / name
    shutil.copytree(project / "examples" / "torchserve", folder,
                    ignore=shutil.ignore_patterns(".serve-pipeline"))
    (folder / "serve.yaml").write_text(
        quick_torchserve_spec(name, failure="{probes: [wrong_shape, unknown_model]}"))
    return folder


def test_two_torchserve_pipelines_at_once(project: Path) -> None:
    folders = [torchserve_project(project, name) for name in ("iso-a", "iso-b")]
    processes = [start_cli(["run"], folder) for folder in folders]
    outputs = [process.communicate(timeout=400) for process in processes]
    for process, (stdout, stderr) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, stdout + stderr
    records = [json.loads(sorted((f / ".serve-pipeline" / "runs").glob("*/record.json"))[-1]
                          .read_text()) for f in folders]
    ports = [next(s for s in r["stages"] if s["name"] == "start")["details"]["ports"]
             for r in records]
    assert not set(ports[0].values()) & set(ports[1].values())
    homes = [f / ".serve-pipeline" / "runs" / r["run_id"] / "torchserve"
             for f, r in zip(folders, records, strict=True)]
    assert homes[0] != homes[1] and all(home.is_dir() for home in homes)
    for home in homes:                     # keys and pid files went with their servers
        assert not list(home.rglob("key_file.json"))
        assert not list(home.rglob(".model_server.pid"))
    logs = [(home / "logs" / "ts_log.log").read_text() for home in homes]
    assert "iso-a" in logs[0] and "iso-b" not in logs[0]
    assert "iso-b" in logs[1] and "iso-a" not in logs[1]


def test_two_runs_given_one_fixed_port_never_measure_each_others_server(
        project: Path) -> None:
    """The second tritonserver cannot bind the port (it says so, and lives on a while),
    but the first one answers there: that run must stop (a failed stage, exit 1), not go on
    measuring a server it did not start (or stop at preflight, exit 2, when the first one
    already held the port then)."""
    port = free_ports(1)[0]
    spec = project / "serve.yaml"
    spec.write_text(fast_spec(spec.read_text()).replace("ports: {}", f"ports: {{http: {port}}}"))
    runs = [start_cli(["run", "--stages", "parity"], project) for _ in range(2)]
    outputs = [run.communicate(timeout=300) for run in runs]
    codes = sorted(run.returncode for run in runs)
    assert codes in ([0, 1], [0, 2]), [out[1][-600:] for out in outputs]
    stderr = next(err for run, (_, err) in zip(runs, outputs, strict=True) if run.returncode)
    assert f"server.ports.http: port {port} on 127.0.0.1" in stderr, stderr
