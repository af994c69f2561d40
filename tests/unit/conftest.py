"""The unit suite starts no process: any attempt fails the test that made it (tests that
need a process, the CLI's included, live in tests/integration)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any, NoReturn

import pytest

REPO = Path(__file__).resolve().parents[2]


class ProcessStarted(AssertionError):
    """A unit test tried to start a process."""


@pytest.fixture(autouse=True)
def no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: subprocess.Popen[Any], args: object, *rest: object, **kwargs: object,
               ) -> NoReturn:
        raise ProcessStarted(f"unit tests start no process; tried {args!r}")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example project copied to a fresh working directory, as in tests/conftest.py,
    but marked as its own repository without running git: `.git` is what the spec's
    inputs-inside-the-project rule looks for."""
    shutil.copytree(REPO / "examples", tmp_path / "examples",
                    ignore=shutil.ignore_patterns("__pycache__", ".serve-pipeline"))
    shutil.copytree(REPO / "environments", tmp_path / "environments")
    shutil.copyfile(REPO / "serve.yaml.example", tmp_path / "serve.yaml")
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path
