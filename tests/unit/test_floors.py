"""The floors of `pipeline`, read from the source: a module imports its own floor and those
below it, never one above (function-level and TYPE_CHECKING imports count too)."""

from __future__ import annotations

from .test_layout import import_graph

# Bottom to top. A module outside these packages is not placed on a floor.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("pipeline.statistics", "pipeline.request_types"),
    ("pipeline.spec",),
    ("pipeline.model",),
    ("pipeline.servers", "pipeline.release"),
    # measure/ takes what it needs as parameters: it never reads a run's context.
    ("pipeline.measure",),
    ("pipeline.context",),
    ("pipeline.gates",),
    ("pipeline.report",),
)


def floor_of(module: str) -> int | None:
    for level, packages in enumerate(FLOORS):
        if any(module == p or module.startswith(p + ".") for p in packages):
            return level
    return None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, targets in sorted(graph.items()):
        below = floor_of(module)
        for target in sorted(targets):
            above = floor_of(target)
            if below is not None and above is not None and above > below:
                found.append(f"{module} -> {target}")
    return found


def test_the_floor_check_finds_an_upward_import() -> None:
    graph = {"pipeline.servers.base": {"pipeline.measure.wire.grpc_client"},
             "pipeline.measure.wire.grpc_client": {"pipeline.request_types"}}
    assert upward_imports(graph) == ["pipeline.servers.base -> pipeline.measure.wire.grpc_client"]


def test_no_import_runs_up_the_floors() -> None:
    assert upward_imports(import_graph()) == []
