"""Edits of a copied example spec for the spec-validation tests, and what loading it says."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import SpecError
from pipeline.servers.specs import load_spec


def with_server_block(path: Path, block: str) -> Path:
    """The spec at `path` with `block` (indented as a key of `server`) at the end of
    `server`, just before `slo:`."""
    text = path.read_text()
    assert text.count("\nslo:") == 1
    path.write_text(text.replace("\nslo:", "\n" + block + "\nslo:"))
    return path


def line_of(path: Path, needle: str) -> int:
    """The first line number (from 1) of `path` that holds `needle`."""
    lines = path.read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if needle in line)


def spec_issues(path: Path) -> list[str]:
    """Every issue loading the spec at `path` reports (it must be refused)."""
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    return [str(issue) for issue in caught.value.issues]
