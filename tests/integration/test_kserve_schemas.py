"""What `export kserve` prints passes the API types of KServe's and Kubernetes' Python SDKs
(PyPI kserve 0.21.0 and kubernetes 35.0.0, downloaded once and hash-checked, read without
being imported: tests/support/kserve_schema.py) strictly, and Kubernetes' rules for names,
labels and annotations; a field set wrong is refused."""

from __future__ import annotations

import copy
import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.kserve_exports import STORAGE, ask_for_gpu_and_memory, exported, release
from tests.support.kserve_schema import Model, document_problems
from tests.support.sdk_wheels import KSERVE, WheelUnavailable, wheel_path


@pytest.mark.parametrize("canary", [None, 25])
@pytest.mark.parametrize("kind", ["triton", "torchserve"])
def test_the_examples_pass_the_sdk_types(project: Path, sdk_types: dict[str, Model], kind: str,
                                         canary: int | None) -> None:
    runtime, service = exported(release(project, kind), canary)
    assert document_problems(runtime, sdk_types) == []
    assert document_problems(service, sdk_types) == []


def test_gpu_and_memory_limits_pass_the_sdk_types(project: Path,
                                                  sdk_types: dict[str, Model]) -> None:
    ask_for_gpu_and_memory(project)
    runtime, service = exported(release(project, "triton"))
    assert service["spec"]["predictor"]["model"]["resources"]["limits"]
    assert document_problems(service, sdk_types) == []
    assert document_problems(runtime, sdk_types) == []


@pytest.mark.parametrize(("where", "value", "complaint"), [
    (("spec", "predictor", "canaryTrafficPercent"), "25", "'25' is not of type 'int'"),
    (("spec", "predictor", "canaryTrafficPercent"), True, "True is not of type 'int'"),
    (("spec", "predictor", "model", "storageURI"), STORAGE,
     "spec.predictor.model.storageURI: unknown field (not in V1beta1ModelSpec)"),
    (("spec", "predictor", "model", "resources"), {"limits": {"memory": "8g"}},
     "spec.predictor.model.resources.limits.memory: '8g' is not a Kubernetes quantity"),
    (("spec", "predictor", "model", "modelFormat"), "triton",
     "'triton' is not an object (V1beta1ModelFormat)"),
    (("metadata", "labels"), ["app"], "metadata.labels: ['app'] is not an object"),
    (("metadata", "name"), "Fraud_MLP", "metadata.name 'Fraud_MLP' is not a valid name"),
    (("metadata", "annotations", "serve-pipeline.dev/release-id"), 1, "is not valid"),
    (("apiVersion",), "serving.kserve.io/v1alpha1", "is not serving.kserve.io/v1beta1"),
])
def test_a_field_set_wrong_is_refused(project: Path, sdk_types: dict[str, Model],
                                      where: tuple[str, ...], value: Any,
                                      complaint: str) -> None:
    _, service = exported(release(project, "triton"), 10)
    broken = copy.deepcopy(service)
    target = broken
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    found = document_problems(broken, sdk_types)
    assert any(complaint in problem for problem in found), found


def test_a_runtime_field_set_wrong_is_refused(project: Path,
                                              sdk_types: dict[str, Model]) -> None:
    runtime, _ = exported(release(project, "torchserve"))
    broken = copy.deepcopy(runtime)
    container = broken["spec"]["containers"][0]
    container["ports"][0]["containerPort"] = "8080"
    container["securityContext"]["runAsNonroot"] = True
    del container["name"]
    found = document_problems(broken, sdk_types)
    assert "spec.containers.0.ports.0.containerPort: '8080' is not of type 'int'" in found
    assert "spec.containers.0.securityContext.runAsNonroot: unknown field (not in " \
        "V1SecurityContext)" in found
    assert "spec.containers.0: 'name' is a required property" in found


def test_a_wheel_that_does_not_match_its_pinned_hash_is_one_line(tmp_path: Path) -> None:
    cached = wheel_path(KSERVE)
    wrong = replace(KSERVE, sha256=hashlib.sha256(b"not the wheel").hexdigest())
    (tmp_path / KSERVE.filename).write_bytes(cached.read_bytes())
    with pytest.raises(WheelUnavailable) as refused:
        wheel_path(wrong, tmp_path)
    assert "\n" not in str(refused.value)
    assert str(refused.value).startswith("pip download kserve==0.21.0: ")
