"""Serving images for real: built by a Docker daemon, run through every stage, pushed to a
registry on loopback, and recorded in the release by digest."""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import docker_images
from tests.support.cli import cli, latest_record
from tests.support.specs import fast_spec

pytestmark = [pytest.mark.integration, pytest.mark.slow]
BASE_TAG = "serve-pipeline/triton-cpu:2.51"
CACHE = Path(os.environ.get("SERVE_PIPELINE_IMAGE_CACHE", "/var/tmp/serve-pipeline-cache"))


@pytest.fixture(scope="module")
def docker_client() -> Iterator[Any]:
    client = docker_images.docker_client()
    if client is None:
        if os.environ.get("DOCKER_HOST"):
            pytest.fail(f"DOCKER_HOST={os.environ['DOCKER_HOST']} is set but no daemon answers")
        pytest.skip('no Docker daemon here: start one with eval "$(.ci/docker-up)"')
    yield client
    client.close()


@pytest.fixture(scope="module")
def triton_base(docker_client: Any) -> str:
    """An offline, CPU-only image laid out like NVIDIA's Triton image (python backend,
    numpy, onnxruntime): CI cannot reach nvcr.io."""
    return docker_images.triton_cpu_base(docker_client, BASE_TAG, CACHE)


@pytest.fixture
def local_registry(tmp_path: Path) -> Iterator[str]:
    if shutil.which("docker-registry") is None:
        pytest.fail("docker-registry is not installed (.ci/docker-up installs it)")
    with docker_images.registry(tmp_path / "registry") as address:
        yield address


def docker_spec(project: Path, base: str, repository: str | None) -> Path:
    spec = project / "serve.yaml"
    text = fast_spec(spec.read_text()).replace(
        "source: examples/mlp/model.pt", "source: examples/mlp/model.onnx").replace(
        "format: torchscript", "format: onnx").replace("runtime: process", "runtime: docker")
    image = f"  image: {{base: '{base}'" + (f", repository: '{repository}'" if repository
                                            else "") + "}"
    text = "\n".join(line for line in text.splitlines() if not line.startswith("  image: "))
    spec.write_text(text.replace("  ports: {}", "  ports: {}\n" + image) + "\n")
    return spec


def registry_digest(address: str, name: str, tag: str) -> str:
    request = urllib.request.Request(
        f"http://{address}/v2/{name}/manifests/{tag}", method="HEAD",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return str(reply.headers["Docker-Content-Digest"])


def test_promote_with_the_docker_runtime(fast_project: Path, docker_client: Any,
                                         triton_base: str, local_registry: str) -> None:
    repository = f"{local_registry}/ml/fraud-mlp"
    docker_spec(fast_project, triton_base, repository)
    # A store credential in the tool's environment never reaches the image (nor the
    # container, which gets no environment of ours: `environment: {}` in the engine).
    planted = "planted-secret-4f2a"
    result = cli(["promote", "staging"], fast_project, timeout=900,
                 env={**os.environ, "AWS_SECRET_ACCESS_KEY": planted})
    assert result.returncode == 0, result.stdout + result.stderr
    record = latest_record(fast_project)
    assert [s["status"] for s in record["stages"]] == \
        ["passed"] * 5 + ["skipped", "passed", "skipped", "passed"]  # no replay, no regression
    start = next(s for s in record["stages"] if s["name"] == "start")
    assert start["details"]["runtime"] == "docker"
    release = re.findall(r"^release (\S+)$", result.stdout, re.M)[-1]
    manifest = json.loads(next((fast_project / ".serve-pipeline" / "store" / "releases")
                               .rglob(f"{release}.json")).read_text())
    image = manifest["image"]
    assert image["pushed"] and image["reference"] == f"{repository}@{image['digest']}"
    assert registry_digest(local_registry, "ml/fraud-mlp", image["tag"]) == image["digest"]
    labels = docker_client.images.get(image["id"]).labels
    assert labels["io.serve-pipeline.artifact.sha256"] == manifest["artifact"]["sha256"]
    assert labels["io.serve-pipeline.config.sha256"] == manifest["config"]["sha256"]
    config = docker_client.images.get(image["id"]).attrs["Config"]
    assert config["User"] == "1000:1000"
    assert not any(planted in entry for entry in config.get("Env") or [])
    left = docker_client.containers.list(all=True, filters={"label": "io.serve-pipeline.run"})
    assert left == []


def test_docker_failures_are_one_line(fast_project: Path, docker_client: Any,
                                      triton_base: str, tmp_path: Path) -> None:
    docker_spec(fast_project, triton_base, None)
    nobody = cli(["run"], fast_project,
                 env={**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no.sock"})
    assert nobody.returncode == 2 and "no Docker daemon reachable" in nobody.stderr
    docker_spec(fast_project, "serve-pipeline/no-such-base:0", None)
    missing = cli(["run"], fast_project)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "base image serve-pipeline/no-such-base:0 is not on the Docker host" in missing.stderr
    port = docker_images.free_port()
    docker_spec(fast_project, triton_base, f"127.0.0.1:{port}/ml/fraud-mlp")
    refused = cli(["promote", "staging"], fast_project, timeout=900)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "push of 127.0.0.1" in refused.stderr
    assert not list((fast_project / ".serve-pipeline" / "store").rglob("releases/*/*.json"))
    broken = fast_project / "examples" / "mlp" / "model.onnx"
    # Looks like ONNX to preflight (it begins with ir_version's tag); the server refuses it.
    broken.write_bytes(b"\x08\x07not an onnx graph")
    docker_spec(fast_project, triton_base, None)
    dead = cli(["run"], fast_project, timeout=900)
    assert dead.returncode == 1 and "Traceback" not in dead.stderr
    assert "readiness" in dead.stderr or "start" in dead.stderr
    left = docker_client.containers.list(all=True, filters={"label": "io.serve-pipeline.run"})
    assert left == []
