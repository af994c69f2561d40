"""The layout's import rules, read from the source (no module is imported): no import
cycle among the modules of `pipeline` and `stages`, and only the runner imports `stages`."""

from __future__ import annotations

import ast
import pkgutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("pipeline", "stages")
# Copied into the served model's folder and run by the server, never imported here.
NOT_MODULES = ("pipeline/servers/assets",)


def module_files() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO)
            if relative.as_posix().startswith(NOT_MODULES):
                continue
            parts = relative.with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module of ours that `path` imports, at any depth (function-level included).
    A package is not counted as imported by its own submodules' imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from package import module` imports the module; any other name, the package.
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in known else base)
    return {module for module in found if module in known and module != name}


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imports_of(name, path, set(modules)) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return [*stack[stack.index(target):], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_sees_the_packages() -> None:
    graph = import_graph()
    assert "pipeline.runner" in graph and "stages.latency" in graph
    assert "stages.build" in graph["pipeline.runner"]
    assert "pipeline.release.store.base" in graph["pipeline.release.store.s3"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_only_the_runner_imports_stages() -> None:
    offenders = {name: sorted(t for t in targets if t.split(".")[0] == "stages")
                 for name, targets in import_graph().items() if name.startswith("pipeline")}
    assert {name: t for name, t in offenders.items() if t} == {
        "pipeline.runner": ["stages.build", "stages.latency", "stages.parity",
                            "stages.publish", "stages.readiness", "stages.regression",
                            "stages.replay", "stages.saturation",
                            "stages.start"]}


def test_every_reliability_module_carries_the_marker() -> None:
    unmarked = [path.name for path in sorted((REPO / "tests" / "reliability").glob("test_*.py"))
                if "pytest.mark.reliability" not in path.read_text(encoding="utf-8")]
    assert unmarked == []


TEST_FOLDERS = ("unit", "integration", "reliability")


def folders_imported(path: Path, home: str | None) -> set[str]:
    """The test folders (other than `home`) whose modules `path` imports."""
    folders: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 1:
                continue  # its own folder
            names = [f"tests.{node.module or ''}" if node.level == 2 else node.module or ""]
        else:
            continue
        for parts in (name.split(".") for name in names):
            if parts[0] == "tests" and len(parts) > 1 and parts[1] in TEST_FOLDERS:
                folders.add(parts[1])
    return folders - {home} if home else folders


def test_shared_test_helpers_live_in_tests_support() -> None:
    """A test folder takes another folder's code only through tests/support, which imports
    no test folder and holds no tests (helpers beside the tests, not among them)."""
    tests = REPO / "tests"
    crossings = {}
    for path in sorted(tests.rglob("*.py")):
        parts = path.relative_to(tests).parts
        home = parts[0] if len(parts) > 1 and parts[0] in TEST_FOLDERS else None
        if folders := folders_imported(path, home):
            crossings[path.relative_to(REPO).as_posix()] = sorted(folders)
    assert crossings == {}
    assert sorted(p.name for p in (tests / "support").glob("test_*.py")) == []


def test_no_support_module_shadows_another_module() -> None:
    """tests/support/crash_driver.py runs by path, which puts tests/support first on
    sys.path: a helper named like a module it imports (http, moto) would replace it."""
    helpers = {path.stem for path in (REPO / "tests" / "support").glob("*.py")}
    taken = set(sys.stdlib_module_names) | {module.name for module in pkgutil.iter_modules()}
    assert sorted(helpers & taken) == []
