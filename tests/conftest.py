"""Shared fixtures: a copy of the example project in a temp dir, and spec writers."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example model, its samples and the environments, copied to a fresh folder
    that is also the working directory (so messages show relative paths)."""
    shutil.copytree(REPO / "examples", tmp_path / "examples",
                    ignore=shutil.ignore_patterns("__pycache__", ".serve-pipeline"))
    shutil.copytree(REPO / "environments", tmp_path / "environments")
    shutil.copyfile(REPO / "serve.yaml.example", tmp_path / "serve.yaml")
    # A repository of its own: paths in the spec must stay inside it.
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def write_spec(project: Path) -> Callable[[str, str], Path]:
    def write(text: str, name: str = "serve.yaml") -> Path:
        path = project / name
        path.write_text(text)
        return path

    return write
