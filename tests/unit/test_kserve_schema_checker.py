"""The strict checker behind the KServe schema tests (tests/support/kserve_schema.py), on
model classes written as the SDKs' generator writes them, so that it needs no wheel."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.kserve_schema import Model, TypeChecker, models_in

GENERATED = b'''
class V1Port(object):
    openapi_types = {'container_port': 'int', 'name': 'str', 'ratio': 'float'}
    attribute_map = {'container_port': 'containerPort', 'name': 'name', 'ratio': 'ratio'}

    @container_port.setter
    def container_port(self, container_port):
        if self.local_vars_configuration.client_side_validation and container_port is None:
            raise ValueError("Invalid value for `container_port`, must not be `None`")
        self._container_port = container_port


class V1ResourceRequirements(object):
    openapi_types = {'limits': 'dict(str, str)'}
    attribute_map = {'limits': 'limits'}


class V1Thing(object):
    openapi_types = {'ports': 'list[V1Port]', 'labels': 'dict(str, str)', 'on': 'bool',
                     'resources': 'V1ResourceRequirements', 'status': 'object',
                     'overhead': 'dict(str, ResourceQuantity)', 'other': 'V1Missing'}
    attribute_map = {'ports': 'ports', 'labels': 'labels', 'on': 'on',
                     'resources': 'resources', 'status': 'status', 'overhead': 'overhead',
                     'other': 'other'}
'''


@pytest.fixture(scope="module")
def checker() -> TypeChecker:
    return TypeChecker({model.name: model for model in models_in(GENERATED)})


def problems(checker: TypeChecker, value: Any) -> list[str]:
    return checker.model_problems(value, checker.models["V1Thing"], "")


def test_the_generated_classes_are_read_with_json_keys_and_required_fields() -> None:
    port, _, _ = models_in(GENERATED)
    assert port == Model("V1Port", {"containerPort": ("container_port", "int"),
                                    "name": ("name", "str"), "ratio": ("ratio", "float")},
                         frozenset({"containerPort"}))


def test_a_value_of_the_types_passes(checker: TypeChecker) -> None:
    assert problems(checker, {
        "ports": [{"containerPort": 8080, "name": "http", "ratio": 1}], "labels": {"a": "b"},
        "on": False, "resources": {"limits": {"memory": "8Gi", "cpu": "500m"}},
        "status": {"anything": [1]}, "overhead": {"cpu": "1.5"}}) == []


@pytest.mark.parametrize(("value", "complaint"), [
    ({"ports": [{"containerPort": "8080"}]}, "ports.0.containerPort: '8080' is not of type 'int'"),
    ({"ports": [{"containerPort": True}]}, "ports.0.containerPort: True is not of type 'int'"),
    ({"ports": [{"containerPort": 1, "ratio": "1"}]}, "ports.0.ratio: '1' is not of type"),
    ({"ports": [{"name": "http"}]}, "ports.0: 'containerPort' is a required property"),
    ({"ports": [{"containerPort": 1, "Name": "x"}]},
     "ports.0.Name: unknown field (not in V1Port)"),
    ({"ports": {"containerPort": 1}}, "ports: {'containerPort': 1} is not a list"),
    ({"labels": {"a": 1}}, "labels.a: 1 is not of type 'str'"),
    ({"labels": ["a"]}, "labels: ['a'] is not an object (dict(str, str))"),
    ({"on": "true"}, "on: 'true' is not of type 'bool'"),
    ({"resources": {"limits": {"memory": "8g"}}},
     "resources.limits.memory: '8g' is not a Kubernetes quantity"),
    ({"overhead": {"cpu": "1 core"}}, "overhead.cpu: '1 core' is not a Kubernetes quantity"),
    ({"resources": "8Gi"}, "resources: '8Gi' is not an object (V1ResourceRequirements)"),
    ({"other": {}}, "other: the SDKs have no model 'V1Missing' to check it against"),
])
def test_a_value_of_another_type_is_refused(checker: TypeChecker, value: dict[str, Any],
                                            complaint: str) -> None:
    found = problems(checker, value)
    assert any(complaint in problem for problem in found), found
