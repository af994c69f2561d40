"""Every runtime dependency declared in pyproject.toml (the core and each feature's extra)
is used: imported by the code (read from the source, nothing is imported), or found by it as
a program or package path."""

from __future__ import annotations

import ast
import re
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Used without an import statement: the name the code looks for (a program it runs, or a
# package it locates with importlib.util.find_spec for the binaries inside).
FOUND_NOT_IMPORTED = {"nvidia-pytriton": '"pytriton"',
                      "torch-model-archiver": "torch-model-archiver"}


def normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def declared_dependencies() -> set[str]:
    tomllib = pytest.importorskip("tomllib", reason="tomllib comes with Python 3.11")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    features = [requirement for extra, requirements in project["optional-dependencies"].items()
                if extra not in ("test", "all") for requirement in requirements]
    return {normalized(re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0])
            for requirement in [*project["dependencies"], *features]}


def source_files() -> list[Path]:
    return [path for package in ("pipeline", "stages") for path in (REPO / package).rglob("*.py")]


def imported_top_levels() -> set[str]:
    found: set[str] = set()
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module.split(".")[0])
    return found


def test_every_declared_dependency_is_used() -> None:
    owners = packages_distributions()
    imported = {normalized(distribution) for module in imported_top_levels()
                for distribution in owners.get(module, [])}
    assert "torch" in imported and "pyyaml" in imported
    assert sorted(declared_dependencies() - imported - set(FOUND_NOT_IMPORTED)) == []


def test_what_is_used_without_an_import_is_looked_for() -> None:
    text = "\n".join(path.read_text() for path in source_files())
    for distribution, name in FOUND_NOT_IMPORTED.items():
        assert distribution in declared_dependencies()
        assert name in text, f"{distribution}: nothing looks for {name}"
