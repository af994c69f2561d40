"""Shared fixtures: a copy of the example project in a temp dir, spec writers, and one moto
(S3) server for the session. Helpers shared by the test folders are in tests/support."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.moto_s3 import S3Server, moto_server

REPO = Path(__file__).resolve().parent.parent


def copy_example_project(folder: Path) -> Path:
    """The example model, its samples and the environments, copied into `folder`, a git
    repository of its own (paths in the spec must stay inside it)."""
    shutil.copytree(REPO / "examples", folder / "examples",
                    ignore=shutil.ignore_patterns("__pycache__", ".serve-pipeline"))
    shutil.copytree(REPO / "environments", folder / "environments")
    shutil.copyfile(REPO / "serve.yaml.example", folder / "serve.yaml")
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    return folder


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example project in a fresh folder that is also the working directory (so
    messages show relative paths)."""
    copy_example_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def write_spec(project: Path) -> Callable[[str, str], Path]:
    def write(text: str, name: str = "serve.yaml") -> Path:
        path = project / name
        path.write_text(text)
        return path

    return write


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3-compatible HTTP server (moto in server mode) on a free loopback port."""
    with moto_server(tmp_path_factory.mktemp("moto") / "moto.log") as server:
        yield server


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The test process itself talks to the moto server through the standard variables."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
                "AWS_ENDPOINT_URL_S3"):
        monkeypatch.setenv(key, s3_server.env[key])
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return s3_server
