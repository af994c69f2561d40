"""`serve-pipeline --help` imports only the Typer app: read from the source (nothing is
imported), every module that loading `pipeline.cli` runs, following module-level imports
(packages' `__init__` included, function bodies and `if TYPE_CHECKING:` blocks not),
imports no third-party module but Typer and Rich. The heavy ones (torch, numpy, boto3,
docker, dvc, onnxruntime, ray, tritonclient, pydantic, ...) load where a command uses them;
benchmarks/cli_startup.py times the result."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ALLOWED_THIRD_PARTY = {"typer", "rich"}
OURS = ("pipeline", "stages")


def source_of(module: str) -> Path | None:
    base = REPO.joinpath(*module.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def module_level_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run when the module is imported (not function or class
    bodies' functions, not `if TYPE_CHECKING:`)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.If):
            if not _is_type_checking(node):
                yield from module_level_statements(node.body)
            yield from module_level_statements(node.orelse)
        elif isinstance(node, ast.Try):
            for part in (node.body, node.orelse, node.finalbody,
                         *(handler.body for handler in node.handlers)):
                yield from module_level_statements(part)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            yield from module_level_statements(node.body)
        else:
            yield node


def imported_names(module: str, path: Path) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in module_level_statements(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def loaded_by(root: str) -> tuple[set[str], set[str]]:
    """(our modules, third-party top-level names) that importing `root` runs."""
    ours: set[str] = set()
    third_party: set[str] = set()
    pending = [root]
    while pending:
        name = pending.pop()
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):     # a module's packages run first
            module = ".".join(parts[:depth])
            if parts[0] not in OURS:
                top = parts[0]
                if top not in sys.stdlib_module_names and top != "__future__":
                    third_party.add(top)
                break
            path = source_of(module)
            if path is None or module in ours:
                continue
            ours.add(module)
            pending.extend(imported_names(module, path))
    return ours, third_party


def test_the_cli_loads_only_typer_and_rich() -> None:
    ours, third_party = loaded_by("pipeline.cli.app")
    assert "pipeline.cli.app" in ours and "pipeline.cli.run_commands" in ours
    assert third_party <= ALLOWED_THIRD_PARTY, (
        f"`serve-pipeline --help` would import {sorted(third_party - ALLOWED_THIRD_PARTY)}; "
        "import them inside the functions that use them")


def test_the_walk_sees_a_heavy_module_level_import() -> None:
    """The check can fail: the store's S3 module imports boto3 when it is loaded."""
    _, third_party = loaded_by("pipeline.release.store.s3")
    assert "boto3" in third_party
