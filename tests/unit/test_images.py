"""The generated build contexts: files, labels, user, command; GPU variants included."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from pipeline.servers.docker.images import ImageDigests, torchserve_context, triton_context
from pipeline.servers.specs import load_spec
from pipeline.servers.torchserve.properties import render_properties
from pipeline.servers.torchserve.spec import TORCHSERVE_SPEC
from pipeline.servers.triton.config import write_model_repository
from pipeline.servers.triton.spec import TRITON_SPEC
from pipeline.servers.triton.tensorrt import trtexec_argv
from pipeline.spec.models import Spec

REPO = Path(__file__).resolve().parents[2]
DIGESTS = ImageDigests("a" * 64, "b" * 64, "c" * 64, "sha256:" + "d" * 64)


def spec_with(project: Path, extra: str, replace: dict[str, str] | None = None) -> Spec:
    path = project / "serve.yaml"
    text = path.read_text()
    for old, new in (replace or {}).items():
        text = text.replace(old, new)
    path.write_text(text.replace("  ports: {}", "  ports: {}\n" + extra))
    return load_spec(path).spec


def test_triton_gpu_image_with_a_native_backend(project: Path, tmp_path: Path) -> None:
    spec = spec_with(project, "  image: {base: 'nvcr.io/nvidia/tritonserver:24.08-py3', "
                     "repository: registry.example.com/ml/fraud-mlp}",
                     {"runtime: process": "runtime: docker", "device: cpu": "device: gpu",
                      "backend: python": "backend: onnxruntime",
                      "source: examples/mlp/model.pt": "source: examples/mlp/model.onnx",
                      "format: torchscript": "format: onnx"})
    repository = write_model_repository(spec, project / "examples/mlp/model.onnx", None,
                                        tmp_path / "repo")
    config = repository.config_path.read_text()
    assert 'backend: "onnxruntime"' in config and "KIND_GPU" in config
    assert 'default_model_filename: "model.onnx"' in config and "parameters" not in config
    context = triton_context(spec, repository.root, DIGESTS, TRITON_SPEC.production_ports)
    lines = context.dockerfile.splitlines()
    assert lines[0] == "FROM nvcr.io/nvidia/tritonserver:24.08-py3"
    assert "USER 1000:1000" in lines
    assert 'ENTRYPOINT ["tritonserver"]' in lines
    assert any(line.startswith("CMD") and "--allow-gpu-metrics=true" in line and
               "--model-control-mode=none" in line for line in lines)
    assert "COPY --chown=1000:1000 models/ /models/" in lines
    assert context.labels["io.serve-pipeline.model.sha256"] == "a" * 64
    assert context.labels["io.serve-pipeline.spec.sha256"].endswith("d" * 64)
    assert sorted(context.files) == ["models/fraud-mlp/1/model.onnx",
                                     "models/fraud-mlp/config.pbtxt"]
    with tarfile.open(fileobj=io.BytesIO(context.tar())) as archive:
        names = archive.getnames()
        assert names == sorted(names) and "Dockerfile" in names
        assert {member.mtime for member in archive.getmembers()} == {0}
    assert context.tar() == triton_context(spec, repository.root, DIGESTS,
                                           TRITON_SPEC.production_ports).tar()


def test_triton_cpu_python_backend_image(project: Path, tmp_path: Path) -> None:
    spec = spec_with(project, "  image: {base: 'local/triton-cpu:test'}",
                     {"runtime: process": "runtime: docker"})
    repository = write_model_repository(spec, project / "examples/mlp/model.pt", None,
                                        tmp_path / "repo")
    context = triton_context(spec, repository.root, DIGESTS, TRITON_SPEC.production_ports)
    assert "--allow-gpu-metrics=false" in context.dockerfile
    assert "models/fraud-mlp/1/model.py" in context.files
    assert "models/fraud-mlp/1/model_runtime.py" in context.files


def test_torchserve_image_keeps_auth_and_loopback_management(project: Path,
                                                             tmp_path: Path) -> None:
    spec = spec_with(project, "  image: {base: 'pytorch/torchserve:0.12.0-gpu'}",
                     {"kind: triton": "kind: torchserve", "  backend: python\n": "",
                      "device: cpu": "device: gpu"})
    mar = tmp_path / "fraud-mlp.mar"
    mar.write_bytes(b"PK not really a zip")
    config = render_properties(spec, TORCHSERVE_SPEC.production_ports, "model-store",
                               loopback_only=False)
    context = torchserve_context(spec, mar, config, DIGESTS,
                                 TORCHSERVE_SPEC.production_ports)
    assert context.dockerfile.startswith("FROM pytorch/torchserve:0.12.0-gpu\n")
    assert "USER 1000:1000" in context.dockerfile
    assert '"--foreground"' in context.dockerfile and '"--ncs"' in context.dockerfile
    baked = context.files["config.properties"].decode()
    assert "model_store=/home/model-server/model-store" in baked
    assert "disable_token_authorization=false" in baked
    assert "management_address=http://127.0.0.1:8081" in baked
    assert context.files["model-store/fraud-mlp.mar"] == mar.read_bytes()
    assert context.labels["io.serve-pipeline.server"] == "torchserve"


def test_tensorrt_engine_shapes(project: Path) -> None:
    spec = spec_with(project, "  image: {base: 'nvcr.io/nvidia/tritonserver:24.08-py3'}",
                     {"runtime: process": "runtime: docker", "device: cpu": "device: gpu",
                      "backend: python": "backend: tensorrt",
                      "source: examples/mlp/model.pt": "source: examples/mlp/model.onnx",
                      "format: torchscript": "format: onnx"})
    argv = trtexec_argv(spec, "/work/model.onnx", "/work/model.plan")
    assert argv[:3] == ["trtexec", "--onnx=/work/model.onnx", "--saveEngine=/work/model.plan"]
    assert "--minShapes=features:1x16" in argv
    assert "--optShapes=features:16x16" in argv        # the largest preferred batch size
    assert "--maxShapes=features:32x16" in argv


def test_runtime_docker_needs_a_base(project: Path) -> None:
    import pytest

    from pipeline.errors import SpecError

    path = project / "serve.yaml"
    path.write_text(path.read_text().replace("runtime: process", "runtime: docker"))
    with pytest.raises(SpecError, match=r"server\.image\.base"):
        load_spec(path)
