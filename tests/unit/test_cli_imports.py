"""`serve-pipeline --help` imports only the Typer app: read from the source (nothing is
imported), every module that loading `pipeline.cli` runs, following module-level imports
(packages' `__init__` included, function bodies and `if TYPE_CHECKING:` blocks not),
imports no third-party module but Typer. The heavy ones (torch, numpy, boto3, docker, dvc,
onnxruntime, ray, tritonclient, pydantic, ...) and Rich load where a command uses them, and
the help is Click's plain format, which needs no Rich; benchmarks/cli_startup.py times the
result."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from pipeline.cli.app import app, summary

REPO = Path(__file__).resolve().parents[2]
ALLOWED_THIRD_PARTY = {"typer"}
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


def test_the_cli_loads_only_typer() -> None:
    ours, third_party = loaded_by("pipeline.cli.app")
    assert "pipeline.cli.app" in ours and "pipeline.cli.run_commands" in ours
    assert third_party <= ALLOWED_THIRD_PARTY, (
        f"`serve-pipeline --help` would import {sorted(third_party - ALLOWED_THIRD_PARTY)}; "
        "import them inside the functions that use them")


def test_the_walk_sees_a_heavy_module_level_import() -> None:
    """The check can fail: the store's S3 module imports boto3 when it is loaded."""
    _, third_party = loaded_by("pipeline.release.store.s3")
    assert "boto3" in third_party


def _groups_and_commands(command: Any) -> Iterator[Any]:
    yield command
    for sub in getattr(command, "commands", {}).values():
        yield from _groups_and_commands(sub)


def test_no_command_renders_its_help_with_rich() -> None:
    """Typer's Rich help (rich_markup_mode "rich", its default) imports Rich's console,
    markdown, syntax and traceback when --help is shown."""
    rich_help = [command.name for command in _groups_and_commands(typer.main.get_command(app))
                 if command.rich_markup_mode is not None]
    assert rich_help == []


def test_the_command_list_shows_each_summary_whole() -> None:
    """Click's plain list would cut a summary at the terminal's width and end it with
    "..."; each command's summary is its docstring's first paragraph, wrapped."""
    shown = " ".join(CliRunner().invoke(app, ["--help"], terminal_width=80).output.split())
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    for name, command in group.commands.items():
        if isinstance(command, typer.core.TyperGroup):
            expected = command.help
        else:
            assert command.callback is not None
            expected = summary(command.callback)
        assert f"{name} {expected}" in shown
