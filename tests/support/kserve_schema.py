"""What a Kubernetes API server with KServe would refuse in an object, checked against the API
types of KServe's and Kubernetes' Python SDKs on PyPI at pinned versions (kserve 0.21.0,
kubernetes 35.0.0: tests/support/sdk_wheels.py).

Each SDK model class (`kserve/models/v1beta1_*.py`, `kubernetes/client/models/v1_*.py`) is
read from its wheel with `ast`, never imported: `openapi_types` (attribute -> type such as
'V1beta1PredictorSpec', 'list[V1Container]', 'dict(str, str)', 'int') and `attribute_map`
(attribute -> JSON key), and the attributes whose setter refuses None (required). An object
is checked strictly, as `kubectl apply` is by default: a key the model does not know is an
error, a value of the wrong JSON type is one, nested models are checked the same way; type
'object' takes anything. The SDK types resource quantities as strings, so a quantity's
format (Kubernetes' grammar) is checked here. Then what the types leave to Kubernetes
itself: `apiVersion` and `kind`, the object's name, its labels and annotations
(apimachinery's rules for names and qualified keys).
"""

from __future__ import annotations

import ast
import functools
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.sdk_wheels import WHEELS, Wheel, wheel_path

API_GROUP = "serving.kserve.io"
ROOTS = {"InferenceService": "V1beta1InferenceService",
         "ServingRuntime": "V1alpha1ServingRuntime"}
VERSION_PREFIX = re.compile(r"^V1(alpha\d+|beta\d+)?")
REQUIRED = re.compile(r"^Invalid value for `(\w+)`, must not be `None`$")
# Fields the SDK types as strings (or maps of them) that Kubernetes parses as quantities.
QUANTITY_FIELDS = {("V1ResourceRequirements", "limits"), ("V1ResourceRequirements", "requests")}
QUANTITY_TYPE = "ResourceQuantity"
QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|"
                      r"([eE][+-]?(\d+(\.\d*)?|\.\d+)))?$")
LIST = re.compile(r"^list\[(.+)\]$")
DICT = re.compile(r"^dict\(str, (.+)\)$")

DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
ANNOTATIONS_LIMIT = 256 * 1024


@dataclass(frozen=True)
class Model:
    name: str
    fields: dict[str, tuple[str, str]]    # JSON key -> (attribute, type)
    required: frozenset[str]              # JSON keys


def _literal(body: list[ast.stmt], name: str) -> dict[str, str] | None:
    for statement in body:
        if isinstance(statement, ast.Assign):
            target, assigned = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            target, assigned = statement.target, statement.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == name:
            value = ast.literal_eval(assigned)
            return value if isinstance(value, dict) else None
    return None


def _required_attributes(cls: ast.ClassDef) -> set[str]:
    required = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            message = node.exc.args[0]
            if isinstance(message, ast.Constant) and isinstance(message.value, str):
                found = REQUIRED.match(message.value)
                if found:
                    required.add(found.group(1))
    return required


def models_in(source: bytes) -> list[Model]:
    models = []
    for cls in ast.parse(source).body:
        if not isinstance(cls, ast.ClassDef):
            continue
        types, keys = _literal(cls.body, "openapi_types"), _literal(cls.body, "attribute_map")
        if types is None or keys is None:
            continue
        required = _required_attributes(cls)
        models.append(Model(cls.name, {keys[a]: (a, t) for a, t in types.items()},
                            frozenset(keys[a] for a in required if a in keys)))
    return models


def read_models(wheels: Mapping[Wheel, Path]) -> dict[str, Model]:
    """Every generated model class of the wheels, by class name."""
    models: dict[str, Model] = {}
    for wheel, path in wheels.items():
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                if member.startswith(wheel.models) and member.endswith(".py"):
                    models.update((m.name, m) for m in models_in(archive.read(member)))
    return models


@functools.cache
def sdk_models() -> dict[str, Model]:
    """The models of the pinned SDK wheels (downloaded once; WheelUnavailable otherwise)."""
    return read_models({wheel: wheel_path(wheel) for wheel in WHEELS})


def _quantity_problem(value: Any, where: str) -> list[str]:
    if isinstance(value, int) and not isinstance(value, bool):
        return []
    if isinstance(value, str) and QUANTITY.match(value):
        return []
    return [f"{where}: {value!r} is not a Kubernetes quantity"]


PRIMITIVES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "bool": (bool,),
                                           "float": (int, float), "datetime": (str,),
                                           "date": (str,)}


class TypeChecker:
    """Checks JSON values against the SDK's type strings, strictly."""

    def __init__(self, models: Mapping[str, Model]) -> None:
        self.models = models

    def problems(self, value: Any, kind: str, where: str, quantity: bool = False) -> list[str]:
        if kind == "object":
            return []
        if (inner := LIST.match(kind)) is not None:
            if not isinstance(value, list):
                return [f"{where}: {value!r} is not a list ({kind})"]
            return [p for i, item in enumerate(value)
                    for p in self.problems(item, inner.group(1), f"{where}.{i}", quantity)]
        if (inner := DICT.match(kind)) is not None:
            if not isinstance(value, Mapping):
                return [f"{where}: {value!r} is not an object ({kind})"]
            found = [f"{where}: key {key!r} is not a string" for key in value
                     if not isinstance(key, str)]
            return found + [p for key, item in value.items()
                            for p in self.problems(item, inner.group(1), f"{where}.{key}",
                                                   quantity)]
        if quantity or kind == QUANTITY_TYPE:
            return _quantity_problem(value, where)
        if kind in PRIMITIVES:
            if (isinstance(value, bool) and kind != "bool") or \
                    not isinstance(value, PRIMITIVES[kind]):
                return [f"{where}: {value!r} is not of type '{kind}'"]
            return []
        model = self.models.get(kind)
        if model is None:
            return [f"{where}: the SDKs have no model {kind!r} to check it against"]
        return self.model_problems(value, model, where)

    def model_problems(self, value: Any, model: Model, where: str) -> list[str]:
        if not isinstance(value, Mapping):
            return [f"{where}: {value!r} is not an object ({model.name})"]
        found = [f"{where}: {key!r} is a required property" for key in sorted(model.required)
                 if value.get(key) is None]
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            if key not in model.fields:
                found.append(f"{path}: unknown field (not in {model.name})")
                continue
            attribute, kind = model.fields[key]
            found += self.problems(item, kind, path, (model.name, attribute) in QUANTITY_FIELDS)
        return found


def api_version(model: str) -> str:
    """serving.kserve.io/v1beta1 for V1beta1InferenceService, as the SDK names versions."""
    prefix = VERSION_PREFIX.match(model)
    assert prefix is not None, model
    return f"{API_GROUP}/{prefix.group(0).lower()}"


def _qualified_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        return False
    return len(name) <= 63 and QUALIFIED_NAME.match(name) is not None


def _mapping(value: Any) -> Mapping[str, Any]:
    """labels or annotations; one that is not a map is already a type problem."""
    return value if isinstance(value, Mapping) else {}


def _metadata_problems(metadata: Mapping[str, Any], dns_label: bool) -> list[str]:
    problems = []
    name = metadata.get("name")
    if not isinstance(name, str) or not (
            (DNS_1035_LABEL.match(name) and len(name) <= 63) if dns_label
            else (DNS_SUBDOMAIN.match(name) and len(name) <= 253)):
        problems.append(f"metadata.name {name!r} is not a valid name")
    labels, notes = (_mapping(metadata.get(key)) for key in ("labels", "annotations"))
    for key, value in labels.items():
        if not _qualified_key(key) or not isinstance(value, str) or len(value) > 63 \
                or not LABEL_VALUE.match(value):
            problems.append(f"label {key}={value!r} is not valid")
    for key, value in notes.items():
        if not _qualified_key(key) or not isinstance(value, str):
            problems.append(f"annotation {key}={value!r} is not valid")
    if sum(len(k) + len(str(v)) for k, v in notes.items()) > ANNOTATIONS_LIMIT:
        problems.append("annotations are over 256 KiB")
    return problems


def document_problems(document: Mapping[str, Any], models: Mapping[str, Model]) -> list[str]:
    """Why the API server would refuse `document` given the SDK `models`; empty when it would
    take it."""
    kind = document.get("kind")
    if kind not in ROOTS:
        return [f"kind {kind!r} is not one of {sorted(ROOTS)}"]
    root = ROOTS[str(kind)]
    found = TypeChecker(models).model_problems(document, models[root], "")
    if document.get("apiVersion") != api_version(root):
        found.append(f"apiVersion {document.get('apiVersion')!r} is not {api_version(root)}")
    metadata = document.get("metadata")
    if not isinstance(metadata, Mapping):
        return [*found, "metadata is missing"]
    # KServe names an InferenceService as a DNS-1035 label; other objects as subdomains.
    return found + _metadata_problems(metadata, dns_label=kind == "InferenceService")


def problems(document: Mapping[str, Any]) -> list[str]:
    """`document_problems` against the pinned SDKs' models."""
    return document_problems(document, sdk_models())
