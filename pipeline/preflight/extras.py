"""The optional parts a spec needs (pyproject's extras): each one missing is one line that
names the pip command, and the checks that would import it are skipped."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.preflight.checks import Check
from pipeline.preflight.docker import needs_docker
from pipeline.preflight.scope import Scope
from pipeline.servers import server_kind
from pipeline.spec.models import LoadedSpec

NAME = "extras"


@dataclass(frozen=True)
class Extra:
    """`feature` as the user wrote it in the spec; `modules` what its code imports."""

    extra: str
    feature: str
    modules: tuple[str, ...]
    applies: Callable[[LoadedSpec, Scope], bool]

    def install(self) -> str:
        return f"pip install 'serve-pipeline[{self.extra}]'"


def _publishes_to_s3(loaded: LoadedSpec, scope: Scope) -> bool:
    return (scope.publishes or scope.needs_release) and \
        loaded.spec.publish.store.startswith("s3://")


def server_extra(loaded: LoadedSpec) -> Extra | None:
    """The extra the spec's server kind needs (the kind says which, if any)."""
    part = server_kind(loaded.spec.server.kind).optional_part
    if part is None:
        return None
    return Extra(part.extra, part.feature, part.modules, lambda loaded, scope: True)


EXTRAS = (
    Extra("docker", "A serving image (server.runtime: docker or server.image.base)",
          ("docker",), lambda loaded, scope: scope.starts_server and needs_docker(loaded)),
    Extra("dvc", "A DVC model source (model.source.dvc)", ("dvc",),
          lambda loaded, scope: scope.reads_source and loaded.spec.model.source.dvc is not None),
    Extra("onnx", "An ONNX model (model.format: onnx)", ("onnxruntime",),
          lambda loaded, scope: (scope.starts_server or scope.reads_source)
          and loaded.spec.model.format == "onnx"),
    Extra("s3", "An S3 release store (publish.store: s3://...)", ("boto3",), _publishes_to_s3),
)


def installed(module: str) -> bool:
    if module in sys.modules:           # imported already, or blocked (None)
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_extras(loaded: LoadedSpec, scope: Scope) -> list[Extra]:
    own = server_extra(loaded)
    return [extra for extra in ((own,) if own else ()) + EXTRAS if extra.applies(loaded, scope)
            and not all(installed(module) for module in extra.modules)]


def extra_checks(missing: list[Extra]) -> list[Check]:
    return [Check.failed(NAME, f"{extra.feature} needs: {extra.install()}")
            for extra in missing]
