"""The servers' one lifecycle without starting anything: constructors create nothing, the
one readiness loop's verdicts, loopback ports, and the one port table.

The readiness loop is driven by a scripted server below: the loop only asks a server
questions (alive? ready? why did it die?), and the answers a real server gives are the
integration tests' subject (tests/integration/test_torchserve.py, test_server_crashes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import ServerError
from pipeline.servers.base import BuiltArtifact, ReadinessWords, wait_until_ready
from pipeline.servers.kinds import KIND_SPECS, KINDS
from pipeline.servers.ports import loopback_ports
from pipeline.servers.specs import load_spec
from pipeline.servers.torchserve.kind import TorchServeKind
from pipeline.servers.torchserve.server import TorchServeServer
from pipeline.servers.triton.kind import TritonKind
from pipeline.servers.triton.server import TritonInstallation, TritonServer

REPO = Path(__file__).resolve().parents[2]
WORDS = ReadinessWords("tritonserver", "not ready", poll_s=0.001)


class Scripted:
    """Answers the loop's questions from a script: ready after `ready_after` polls."""

    model_name = "m"
    started_at: float | None = None

    def __init__(self, ready_after: int = 1_000_000, dies_after: int = 1_000_000,
                 failure_after: int = 1_000_000) -> None:
        self.polls = 0
        self.ready_after, self.dies_after, self.failure_after = (ready_after, dies_after,
                                                                 failure_after)

    def alive(self) -> bool:
        self.polls += 1
        return self.polls <= self.dies_after

    def is_ready(self, timeout_s: float = 2.0) -> bool:
        return self.polls >= self.ready_after

    def startup_failure(self) -> str | None:
        return "workers keep dying" if self.polls >= self.failure_after else None

    def describe_death(self) -> str:
        return "tritonserver exited with code 1; log: bad config"

    def log_excerpt(self) -> str:
        return "last log lines: loading"


def test_ready_returns_seconds_since_start() -> None:
    assert 0 <= wait_until_ready(Scripted(ready_after=3), 5.0, WORDS) < 5.0


def test_a_server_that_dies_while_starting_says_why() -> None:
    with pytest.raises(ServerError, match=r"^tritonserver died before it was ready: "
                       r"tritonserver exited with code 1; log: bad config$"):
        wait_until_ready(Scripted(dies_after=2), 5.0, WORDS)


def test_a_startup_failure_stops_the_wait() -> None:
    with pytest.raises(ServerError, match=r"^workers keep dying$"):
        wait_until_ready(Scripted(failure_after=2), 5.0, WORDS)


def test_the_deadline_names_the_model_and_quotes_the_log() -> None:
    with pytest.raises(ServerError, match=r"^tritonserver not ready within 0.05s \(model "
                       r"'m'\); last log lines: loading$"):
        wait_until_ready(Scripted(), 0.05, WORDS)


def test_constructors_create_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    triton = load_spec(REPO / "serve.yaml.example")
    installation = TritonInstallation(tmp_path / "bin", tmp_path / "backends",
                                      tmp_path / "stub", ())
    ports = loopback_ports(TritonKind.port_names)
    TritonServer(installation, tmp_path / "repository", triton, ports, run_dir, {},
                 copy_to=run_dir / "serving-repository")
    torchserve = load_spec(REPO / "examples/torchserve/serve.yaml")
    artifact = BuiltArtifact("torchserve-mar", tmp_path, tmp_path / "m.mar", "d",
                             "config.properties", "", "d", tmp_path / "m.pt", "d")
    server = TorchServeServer(torchserve, artifact, loopback_ports(TorchServeKind.port_names),
                              run_dir, {})
    assert not run_dir.exists()
    assert not server.scratch.exists()
    server.stop()                       # never started: stopping is a no-op
    server.stop()


def test_loopback_ports_keep_the_wanted_ones_and_fill_the_rest() -> None:
    ports = loopback_ports(TorchServeKind.port_names, {"inference": 18080})
    assert list(ports) == list(TorchServeKind.port_names)
    assert ports["inference"] == 18080
    assert len(set(ports.values())) == len(ports)


def test_each_kind_names_its_ports_once_in_its_spec_facts() -> None:
    assert TritonKind.port_names == KIND_SPECS["triton"].port_names == ("http", "grpc", "metrics")
    assert TorchServeKind.port_names == KIND_SPECS["torchserve"].port_names
    assert dict(KIND_SPECS["triton"].production_ports) == {"http": 8000, "grpc": 8001,
                                                           "metrics": 8002}
    assert all(kind.spec is KIND_SPECS[name] and kind.spec.name == name
               for name, kind in KINDS.items())
