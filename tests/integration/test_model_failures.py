"""Model failures stay model failures, on real servers under the pipeline's own load.

A model that raises fails the latency stage on its error-rate gate while the
server (and every python-backend stub or TorchServe worker) stays up; a model
with the wrong output dtype or non-deterministic outputs fails parity on the
gate named for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest

from pipeline import servers
from pipeline.model.tensors import load_samples, take
from pipeline.servers.base import ModelServer, send
from pipeline.servers.specs import load_spec
from pipeline.servers.torchserve.server import TorchServeServer
from pipeline.servers.triton.server import TritonServer
from pipeline.spec.models import LoadedSpec
from tests.support.bad_models import BadModel, bad_model_spec, write_bad_model
from tests.support.cli import cli, latest_record
from tests.support.specs import TORCHSERVE_FAST_STAGES as TORCHSERVE_FAST
from tests.support.specs import fast_spec

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def spec_folder(project: Path, kind: str) -> Path:
    """The folder of a fast spec for `kind` (the example's model, short windows)."""
    if kind == "triton":
        spec = project / "serve.yaml"
        spec.write_text(fast_spec(spec.read_text()))
        return project
    folder = project / "examples" / "torchserve"
    head, _, tail = (folder / "serve.yaml").read_text().partition("\nstages:\n")
    publish = tail.partition("\npublish:\n")[2]
    (folder / "serve.yaml").write_text(head + "\n" + TORCHSERVE_FAST + "\npublish:\n" + publish)
    return folder


def serving(folder: Path, model: BadModel) -> LoadedSpec:
    write_bad_model(folder, model)
    spec = folder / "serve.yaml"
    spec.write_text(bad_model_spec(spec.read_text(), model))
    return load_spec(spec)


@pytest.fixture
def started() -> Iterator[ExitStack]:
    """The servers a test started, stopped after it."""
    with ExitStack() as stack:
        yield stack


def start(loaded: LoadedSpec, folder: Path, started: ExitStack) -> ModelServer:
    return started.enter_context(servers.serving(loaded, folder))


def measure_args(server: ModelServer) -> list[str]:
    if isinstance(server, TritonServer):
        return ["--url", server.base_url]
    assert isinstance(server, TorchServeServer) and server.key_file is not None
    return ["--url", server.inference_url, "--management-url", server.management_url,
            "--metrics-url", server.metrics_url, "--key-file", str(server.key_file)]


def model_processes(server: ModelServer) -> set[int]:
    """Python-backend stubs (Triton) or workers (TorchServe): where the model runs."""
    marks = ("triton_python_backend_stub", "model_service_worker")
    return {process.pid for process in server.process_tree()
            if any(mark in " ".join(process.cmdline()) for mark in marks)}


@pytest.mark.parametrize("kind", ["triton", "torchserve"])
def test_a_raising_model_fails_the_error_rate_gate_and_the_server_stays_up(
        project: Path, tmp_path: Path, kind: str, started: ExitStack) -> None:
    folder = spec_folder(project, kind)
    loaded = serving(folder, "raising")
    server = start(loaded, tmp_path, started)
    before = model_processes(server)
    assert before

    result = cli(["measure", *measure_args(server), "--stages", "latency",
                  "-f", str(folder / "serve.yaml")], project)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    latency = next(s for s in latest_record(folder)["stages"] if s["name"] == "latency")
    assert latency["status"] == "failed"
    failed = [g["name"] for g in latency["gates"] if g["outcome"] == "failed"]
    # Failed requests also count in the latency distribution, censored at the timeout: with
    # 2% of them, p99 (and p95 when its quantile falls there) fail with the error rate.
    # (Gates a short run leaves undecided, as throughput on a busy machine, fail nothing.)
    assert "latency.error_rate" in failed
    assert set(failed) <= {"latency.error_rate", "latency.p99", "latency.p95"}, failed
    assert set(latency["details"]["errors_by_kind"]) == {"http_500"}
    # The errors lead the message, with what the server said when a request was sent again.
    assert latency["message"].startswith("latency.error_rate"), latency["message"]
    assert "requests sent again after the load: " in latency["message"]
    assert latency["details"]["error_example"]
    assert server.alive() and server.is_ready()
    assert model_processes(server) == before        # no stub or worker died or restarted
    samples = load_samples(loaded.spec.model, loaded.spec.stages.parity, loaded.workspace)
    replies = [send(server.infer_request(take(samples, 1)), 10.0) for _ in range(5)]
    assert 200 in [reply.status for reply in replies]


@pytest.mark.parametrize("model, gate", [("wrong_dtype", "parity.output_dtype"),
                                         ("noisy", "parity.deterministic")])
def test_parity_refuses_a_wrong_dtype_and_a_non_deterministic_model(
        project: Path, model: BadModel, gate: str) -> None:
    folder = spec_folder(project, "triton")
    serving(folder, model)
    result = cli(["run", "--stages", "parity"], project)
    assert result.returncode == 1, result.stdout + result.stderr
    parity = next(s for s in latest_record(folder)["stages"] if s["name"] == "parity")
    failed = {g["name"]: g for g in parity["gates"] if not g["passed"]}
    assert gate in failed
    if model == "wrong_dtype":
        assert failed == {gate: failed[gate]}       # the values agree; only the dtype is wrong
        assert failed[gate]["observed"] == "scores served float64 (model float64)"
        assert failed[gate]["threshold"] == "scores float32"
    else:
        assert failed[gate]["observed"] > 0
        assert parity["metrics"]["parity_repeat_differing"] == failed[gate]["observed"]


def test_a_model_that_refuses_the_warm_up_still_serves_on_torchserve(project: Path) -> None:
    """The handler warms up on zeros; a model that raises there is served as on Triton
    (its workers used to die, and TorchServe restarted them forever)."""
    folder = spec_folder(project, "torchserve")
    serving(folder, "refuses_zeros")
    result = cli(["run", "--stages", "parity"], folder)
    assert result.returncode == 0, result.stdout + result.stderr
    log = next((folder / ".serve-pipeline" / "runs").glob("*/server.log")).read_text()
    assert "warm-up on zeros failed (not fatal" in log and "an all-zero item" in log


def test_torchserve_serves_the_dtype_the_model_computes(project: Path,
                                                        started: ExitStack,
                                                        tmp_path: Path) -> None:
    folder = spec_folder(project, "torchserve")
    loaded = serving(folder, "wrong_dtype")
    server = start(loaded, tmp_path, started)
    samples = load_samples(loaded.spec.model, loaded.spec.stages.parity, loaded.workspace)
    reply = send(server.infer_request(take(samples, 2)), 10.0)
    assert reply.status == 200
    assert server.decode_outputs(reply)["scores"].dtype == np.float64
