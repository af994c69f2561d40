"""TorchServe from the same spec: the whole pipeline, isolation, and start failures."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.digest import sha256_file
from pipeline.errors import ServerError
from pipeline.servers.ports import loopback_ports
from pipeline.servers.specs import load_spec
from pipeline.servers.torchserve.kind import TorchServeKind
from tests.support.cli import cli, latest_record
from tests.support.processes import TORCHSERVE, processes_under
from tests.support.specs import TORCHSERVE_FAST_STAGES, torchserve_spec

pytestmark = pytest.mark.integration

@pytest.fixture
def ts_project(project: Path) -> Path:
    folder = project / "examples" / "torchserve"
    (folder / "serve.yaml").write_text(torchserve_spec(TORCHSERVE_FAST_STAGES))
    return folder


def test_promote_with_torchserve_batches_and_leaves_nothing(ts_project: Path) -> None:
    result = cli(["promote", "staging"], ts_project)
    assert result.returncode == 0, result.stdout + result.stderr
    record = latest_record(ts_project)
    assert [s["status"] for s in record["stages"]] == \
        ["passed"] * 5 + ["skipped", "passed", "skipped", "passed"]  # no replay, no regression
    latency = next(s for s in record["stages"] if s["name"] == "latency")
    batches = {int(size): count for size, count in latency["details"]["batch_executions"].items()}
    assert max(batches) > 1, batches                   # TorchServe formed real batches
    assert latency["metrics"]["server_requests"] > 0
    assert latency["metrics"]["server_queue_us"] > 0
    assert "formed batches" in cli(["report", record["run_id"]], ts_project).stdout
    parity = next(s for s in record["stages"] if s["name"] == "parity")
    assert parity["metrics"]["parity_mismatched"] == 0
    assert {p["probe"]: p["status"] for p in parity["details"]["probes"]} == {
        "wrong_shape": 400, "wrong_dtype": 400, "missing_input": 400, "batch_over_max": 400,
        "unknown_model": 404, "oversized_body": 413, "declared_huge_shape": 400}
    probes = {p["probe"]: p for p in parity["details"]["probes"]}
    assert probes["oversized_body"]["limit_enforced"] is True
    assert probes["declared_huge_shape"]["validated_before_allocating"] is True
    [manifest] = (ts_project / ".serve-pipeline" / "store" / "releases").rglob("*.json")
    body = __import__("json").loads(manifest.read_text())
    assert body["artifact"]["kind"] == "torchserve-mar"
    assert body["config"]["file"] == "config.properties" and body["config"]["sha256"]
    wrote = cli(["materialize", "staging", "--to", "served"], ts_project)
    assert wrote.returncode == 0, wrote.stderr
    mar = ts_project / "served" / "model-store" / "fraud-mlp-torchserve.mar"
    assert sha256_file(mar) == body["artifact"]["sha256"]
    assert sha256_file(ts_project / "served" / "config" / "config.properties") == \
        body["config"]["sha256"]
    run_dir = ts_project / ".serve-pipeline" / "runs" / record["run_id"]
    assert not list(run_dir.rglob("key_file.json"))
    assert not list(run_dir.rglob(".model_server.pid"))
    assert not (ts_project / "key_file.json").exists()
    assert processes_under(ts_project, TORCHSERVE) == []


def test_an_eager_model_serves_with_parity(ts_project: Path) -> None:
    spec = ts_project / "serve.yaml"
    spec.write_text(spec.read_text()
                    .replace("source: ../mlp/model.pt", "source: ../mlp/weights.pt")
                    .replace("format: torchscript",
                             "format: eager\n  entrypoint: ../mlp/net.py:build")
                    .replace("saturation: {max_concurrency: 4",
                             "saturation: {enabled: false, max_concurrency: 4"))
    result = cli(["run"], ts_project)
    assert result.returncode == 0, result.stdout + result.stderr
    parity = next(s for s in latest_record(ts_project)["stages"] if s["name"] == "parity")
    assert parity["metrics"]["parity_mismatched"] == 0 and parity["metrics"]["parity_elements"] > 0
    assert processes_under(ts_project, TORCHSERVE) == []


def test_a_reproducible_mar(ts_project: Path, tmp_path: Path) -> None:
    loaded = load_spec(ts_project / "serve.yaml")
    kind = TorchServeKind()
    first = kind.build(loaded, loaded.resolve("../mlp/model.pt"), tmp_path / "a")
    second = kind.build(loaded, loaded.resolve("../mlp/model.pt"), tmp_path / "b")
    assert first.digest == second.digest and first.config_digest == second.config_digest


def test_missing_java_fails_in_one_line(ts_project: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("git",):
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{bare}"
    result = cli(["run"], ts_project, env=env, timeout=120)
    assert result.returncode == 2   # found by preflight, before anything is built
    assert "Traceback" not in result.stderr
    assert "preflight: server.java: java not found" in result.stderr


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_busy_port_is_reported_by_the_server_itself(ts_project: Path, tmp_path: Path,
                                                       busy_port: int) -> None:
    loaded = load_spec(ts_project / "serve.yaml")
    kind = TorchServeKind()
    artifact = kind.build(loaded, loaded.resolve("../mlp/model.pt"), tmp_path)
    ports = loopback_ports(kind.port_names, {"inference": busy_port})
    server = kind.launch(loaded, artifact, ports, tmp_path, dict(os.environ))
    with pytest.raises(ServerError) as caught, server:
        pass
    message = str(caught.value)
    assert "\n" not in message
    assert "Address already in use" in message or "Failed to bind" in message
    assert server.process is not None and not server.process.is_running()


def test_a_handler_that_fails_at_load_fails_readiness(ts_project: Path) -> None:
    (ts_project / "broken.py").write_text(
        "def build():\n    raise RuntimeError('weights do not fit this architecture')\n")
    spec = ts_project / "serve.yaml"
    spec.write_text(spec.read_text().replace("source: ../mlp/model.pt",
                                             "source: ../mlp/weights.pt").replace(
        "format: torchscript", "format: eager\n  entrypoint: broken.py:build"))
    result = cli(["run"], ts_project, timeout=300)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "readiness" in result.stderr and "Failed to load model" in result.stderr
    record = latest_record(ts_project)
    assert [s["status"] for s in record["stages"]][2] == "failed"
    assert processes_under(ts_project, TORCHSERVE) == []
