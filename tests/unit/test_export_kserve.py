"""`export kserve`: the ServingRuntime and InferenceService of a release say what the release
says: its image by digest, its layout, its evidence. That KServe would take them is checked
against the SDKs' API types in tests/integration/test_kserve_schemas.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.cli.app import main
from pipeline.errors import UsageError
from pipeline.export.kserve import export_kserve
from pipeline.release.manifest import manifest_digest
from pipeline.release.materialize import materialize
from pipeline.release.store.local import LocalStore
from tests.support.example_releases import PINNED_IMAGE, UNPUSHED_IMAGE
from tests.support.kserve_exports import (
    STORAGE,
    ask_for_gpu_and_memory,
    exported,
    release,
)


@pytest.mark.parametrize("canary", [None, 25])
@pytest.mark.parametrize(("kind", "model_format", "protocol"), [
    ("triton", "triton", "v2"), ("torchserve", "pytorch", "v1")])
def test_the_objects_say_what_the_release_says(project: Path, kind: str, model_format: str,
                                               protocol: str, canary: int | None) -> None:
    example = release(project, kind)
    runtime, service = exported(example, canary)
    [container] = runtime["spec"]["containers"]
    assert container["image"] == PINNED_IMAGE["reference"]
    predictor = service["spec"]["predictor"]
    model = predictor["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["storageUri"] == STORAGE
    assert model["modelFormat"]["name"] == model_format
    assert model["modelFormat"] in [{k: v for k, v in f.items() if k != "autoSelect"}
                                    for f in runtime["spec"]["supportedModelFormats"]]
    assert model["protocolVersion"] == protocol
    assert protocol in runtime["spec"]["protocolVersions"]
    assert predictor.get("canaryTrafficPercent") == canary
    assert ("canaryTrafficPercent" in predictor) == (canary is not None)
    assert service["metadata"]["name"] == example.loaded.spec.name
    for document in (runtime, service):
        assert document["metadata"]["annotations"] == {
            "serve-pipeline.dev/release-id": example.release_id,
            "serve-pipeline.dev/manifest-sha256": manifest_digest(
                example.store, example.loaded.spec.name, example.release_id),
            "serve-pipeline.dev/attestation-sha256": example.manifest.attestation_digest}


def test_each_kind_runs_on_the_layout_materialize_writes(project: Path) -> None:
    triton, _ = exported(release(project, "triton"))
    [container] = triton["spec"]["containers"]
    assert container["command"] == ["tritonserver"]
    assert "--model-repository=/mnt/models" in container["args"]
    assert "--http-port=8080" in container["args"]
    assert container["ports"][0]["containerPort"] == 8080
    torchserve, _ = exported(release(project, "torchserve"))
    [container] = torchserve["spec"]["containers"]
    assert container["command"] == ["torchserve"]
    assert {"--foreground", "--model-store=/mnt/models/model-store",
            "--ts-config=/mnt/models/config/config.properties"} <= set(container["args"])
    # The port the release's config.properties has TorchServe's inference API listen on.
    assert container["ports"][0]["containerPort"] == 8080


def test_resources_come_from_the_spec(project: Path) -> None:
    ask_for_gpu_and_memory(project)
    runtime, service = exported(release(project, "triton"))
    assert service["spec"]["predictor"]["model"]["resources"] == {
        "limits": {"nvidia.com/gpu": "1", "memory": "8Gi"}}
    assert "--allow-gpu-metrics=true" in runtime["spec"]["containers"][0]["args"]
    _, on_cpu = exported(release(project, "torchserve"))
    assert "resources" not in on_cpu["spec"]["predictor"]["model"]


@pytest.mark.parametrize(("image", "shown"), [
    (None, "it has no pushed serving image"),
    (UNPUSHED_IMAGE, "it has no pushed serving image"),
    ({**PINNED_IMAGE, "reference": "registry.example/ml/fraud-mlp:latest"},
     "its image is registry.example/ml/fraud-mlp:latest"),
])
def test_an_image_not_pinned_by_digest_is_refused(project: Path, image: dict[str, Any] | None,
                                                  shown: str) -> None:
    example = release(project, "triton", image=image)
    with pytest.raises(UsageError, match=rf"^release {example.release_id} of 'fraud-mlp': "
                                         rf"{shown}, not pinned by digest"):
        exported(example)


def test_a_name_kserve_cannot_take_is_refused(project: Path) -> None:
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text().replace("name: fraud-mlp", "name: 9fraud-mlp"))
    example = release(project, "triton")
    with pytest.raises(UsageError, match=r"^name '9fraud-mlp' of release .*: KServe names an "
                                         r"InferenceService with a lowercase letter first"):
        exported(example)


def test_a_release_without_an_attestation_is_refused(project: Path) -> None:
    example = release(project, "triton", attested=False)
    with pytest.raises(UsageError, match="has no attestation"):
        exported(example)


def test_the_storage_uri_defaults_beside_the_releases_of_an_s3_store(project: Path) -> None:
    example = release(project, "triton")
    with pytest.raises(UsageError, match=r"^the store file://.* is not reachable from a "
                                         r"cluster"):
        export_kserve(example.store, example.manifest, None, None)
    # The same store as a bucket would name it (only the URL differs).
    in_s3 = LocalStore(example.store.root, "s3://models/ml/")
    with pytest.raises(UsageError, match=r"^nothing is at s3://models/ml/serving/fraud-mlp/"
                                         rf"{example.release_id}, the default storageUri"):
        export_kserve(in_s3, example.manifest, None, None)
    materialize(example.store, example.manifest,
                str(example.store.root / "serving" / "fraud-mlp" / example.release_id),
                project)
    _, service = export_kserve(in_s3, example.manifest, None, None).documents()
    assert service["spec"]["predictor"]["model"]["storageUri"] == \
        f"s3://models/ml/serving/fraud-mlp/{example.release_id}"


def test_the_command_prints_both_objects_as_yaml(project: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    example = release(project, "triton")
    with pytest.raises(SystemExit) as exited:
        main(["export", "kserve", "production", "--storage-uri", STORAGE, "--canary", "10"])
    assert exited.value.code in (0, None)
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in documents] == ["ServingRuntime", "InferenceService"]
    assert documents == exported(example, 10)
    with pytest.raises(SystemExit) as exited:
        main(["export", "kserve", "production", "--canary", "101", "--storage-uri", STORAGE])
    assert exited.value.code == 2
