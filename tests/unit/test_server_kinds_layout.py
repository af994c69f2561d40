"""Server kinds are told apart only inside their own folders, read from the source: outside
`pipeline/servers/<kind>/` no module imports a kind's modules (so none names a concrete
server class) and none compares a `kind` to a string; only the registry
(`pipeline/servers/kinds.py`) imports each kind."""

from __future__ import annotations

import ast
from pathlib import Path

from pipeline.servers.kinds import KINDS

from .test_layout import REPO, module_files

REGISTRY = "pipeline.servers.kinds"


def kind_packages() -> set[str]:
    return {f"pipeline.servers.{name}" for name in KINDS}


def inside_a_kind(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in kind_packages())


def concrete_classes() -> set[str]:
    """Every class defined in a kind's folder."""
    found = set()
    for module, path in module_files().items():
        if inside_a_kind(module):
            tree = ast.parse(path.read_text(), str(path))
            found |= {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    return found


def kind_imports(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names += [f"{node.module}.{a.name}" for a in node.names]
    return [n for n in names if inside_a_kind(n)]


def _names_a_kind(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "kind") or \
        (isinstance(node, ast.Attribute) and node.attr == "kind")


def _strings(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [s for element in node.elts for s in _strings(element)]
    return []


def kind_comparisons(tree: ast.AST) -> list[int]:
    """Lines comparing a `kind` name or attribute to a string, or anything to a kind's name."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        literals = [s for side in sides for s in _strings(side)]
        if (literals and any(_names_a_kind(side) for side in sides)) or \
                set(literals) & set(KINDS):
            lines.append(node.lineno)
    return lines


def offences(source: str, module: str, classes: set[str]) -> list[str]:
    tree = ast.parse(source)
    found = [f"{module}: imports {name}" for name in kind_imports(tree) if module != REGISTRY]
    found += [f"{module}:{node.lineno}: names {node.id}" for node in ast.walk(tree)
              if isinstance(node, ast.Name) and node.id in classes]
    found += [f"{module}:{line}: compares a kind to a string" for line in kind_comparisons(tree)]
    return found


def test_the_checks_find_what_they_look_for() -> None:
    source = ("from pipeline.servers.triton.server import TritonServer\n"
              "if isinstance(s, TritonServer): pass\n"
              "if spec.server.kind == 'torchserve': pass\n"
              "if name != 'triton': pass\n"
              "if kind in ('a', 'b'): pass\n"
              "if error_type == 'missing' or window.kind == other: pass\n")
    assert offences(source, "pipeline.example", {"TritonServer"}) == [
        "pipeline.example: imports pipeline.servers.triton.server.TritonServer",
        "pipeline.example:2: names TritonServer",
        "pipeline.example:3: compares a kind to a string",
        "pipeline.example:4: compares a kind to a string",
        "pipeline.example:5: compares a kind to a string"]


def test_the_registry_holds_every_kind_folder() -> None:
    folders = {p.name for p in (REPO / "pipeline" / "servers").iterdir()
               if (p / "kind.py").is_file()}
    assert folders == set(KINDS)
    assert {"TritonServer", "TorchServeServer", "ContainerTritonServer"} <= concrete_classes()


def test_kinds_are_told_apart_only_in_their_folders() -> None:
    classes = concrete_classes()
    found: list[str] = []
    for module, path in sorted(module_files().items()):
        if not inside_a_kind(module):
            found += offences(Path(path).read_text(), module, classes)
    assert found == []
