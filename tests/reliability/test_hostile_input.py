"""Hostile and broken specs: always a SpecError with positions, never a traceback."""

from __future__ import annotations

import copy
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.errors import SpecError
from pipeline.servers.specs import load_spec
from pipeline.spec.positions import parse_document
from tests.reliability.conftest import Tally

pytestmark = pytest.mark.reliability

REPO = Path(__file__).resolve().parents[2]
EXAMPLE: dict[str, Any] = parse_document((REPO / "serve.yaml.example").read_text(),
                                         "example").data
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                   st.floats(allow_nan=True), st.text(max_size=20),
                   st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5),
                                                                        st.integers(), max_size=3))


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [prefix] + [p for k, v in value.items() for p in paths(v, (*prefix, k))]
    if isinstance(value, list):
        return [prefix] + [p for i, v in enumerate(value) for p in paths(v, (*prefix, i))]
    return [prefix]


ALL_PATHS = [p for p in paths(EXAMPLE) if p]


def mutate(document: dict[str, Any], path: tuple[Any, ...], leaf: Any, drop: bool) -> None:
    parent: Any = document
    for part in path[:-1]:
        parent = parent[part]
    if drop and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = leaf


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(ALL_PATHS), LEAVES, st.booleans())
def test_mutated_specs_fail_cleanly(project: Path, tally: Tally, path: tuple[Any, ...],
                                    leaf: Any, drop: bool) -> None:
    document = copy.deepcopy(EXAMPLE)
    mutate(document, path, leaf, drop)
    spec = project / "serve.yaml"
    spec.write_text(yaml.safe_dump(document, allow_unicode=True))
    tally.add("bad_inputs")
    try:
        load_spec(spec)
    except SpecError as error:
        assert error.issues and all(issue.line >= 1 for issue in error.issues)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_arbitrary_bytes_fail_cleanly(project: Path, tally: Tally, data: bytes) -> None:
    spec = project / "serve.yaml"
    spec.write_bytes(data)
    tally.add("bad_inputs")
    with pytest.raises(SpecError):
        load_spec(spec)


def test_huge_files_are_refused_before_parsing(project: Path, tally: Tally) -> None:
    spec = project / "serve.yaml"
    spec.write_bytes(b"a: " + b"x" * 2_000_000 + b"\n")
    tally.add("bad_inputs")
    with pytest.raises(SpecError, match="a spec is at most"):
        load_spec(spec)


def test_archives_with_escaping_members_are_refused(tmp_path: Path, tally: Tally) -> None:
    """A published model repository is unpacked with tarfile's data filter."""
    import io

    from pipeline.servers.triton.kind import TritonKind

    evil = tmp_path / "evil.tar"
    with tarfile.open(evil, "w") as archive:
        info = tarfile.TarInfo("../../escaped.txt")
        info.size = 4
        archive.addfile(info, io.BytesIO(b"evil"))
    loaded = load_spec(REPO / "serve.yaml.example")
    tally.add("bad_inputs")
    with pytest.raises(tarfile.OutsideDestinationError):
        TritonKind().restore(loaded, evil, "0" * 64, REPO / "examples/mlp/model.pt",
                             tmp_path / "out")
    assert not (tmp_path / "escaped.txt").exists()
