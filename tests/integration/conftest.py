"""Integration fixtures: a fast variant of the example, and no servers left behind.

The helpers live in tests/support; those that used to be defined here stay importable from
here for modules that still import them from this conftest (import from tests/support)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import cli, latest_record, start_cli, wait_for_stage
from tests.support.kserve_schema import Model, sdk_models
from tests.support.moto_s3 import S3Server
from tests.support.processes import TRITON, processes_under
from tests.support.sdk_wheels import WheelUnavailable
from tests.support.specs import fast_spec

__all__ = ["S3Server", "cli", "fast_project", "fast_spec", "latest_record", "no_leftovers",
           "start_cli", "wait_for_stage"]


@pytest.fixture
def fast_project(project: Path) -> Path:
    spec = project / "serve.yaml"
    spec.write_text(fast_spec(spec.read_text()))
    return project


@pytest.fixture
def no_leftovers(fast_project: Path) -> Callable[[], None]:
    """A check that no tritonserver (or python stub) serves anything of the project."""
    def check() -> None:
        deadline = time.monotonic() + 10
        while processes_under(fast_project, TRITON) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert processes_under(fast_project, TRITON) == []

    return check


@pytest.fixture(scope="session")
def sdk_types() -> dict[str, Model]:
    """The API model classes of the pinned KServe and Kubernetes SDKs (tests/support/
    kserve_schema.py), that exported objects are checked against."""
    try:
        return sdk_models()
    except WheelUnavailable as exc:
        pytest.fail(f"the SDK wheels the schemas come from: {exc}", pytrace=False)
