"""YAML loading that keeps where every key and value came from.

Error messages must name file, line and column, so the loader records a mark
for each key path. It also refuses what a spec never needs and an attacker
could use: duplicate keys, alias expansion bombs, huge or non-UTF-8 files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pipeline.errors import SpecError, SpecIssue

KeyPath = tuple[str | int, ...]

MAX_SPEC_BYTES = 1_000_000
MAX_NODES = 50_000


@dataclass(frozen=True)
class Mark:
    file: str
    line: int
    column: int


@dataclass
class PositionedDocument:
    """Plain data from a YAML file plus the marks of its keys and values."""

    file: str
    data: Any
    value_marks: dict[KeyPath, Mark]
    key_marks: dict[KeyPath, Mark]

    def mark_for(self, path: KeyPath) -> Mark:
        """The mark of `path`, else of its nearest ancestor, else the top of the file."""
        for cut in range(len(path), -1, -1):
            prefix = path[:cut]
            if prefix in self.key_marks:
                return self.key_marks[prefix]
            if prefix in self.value_marks:
                return self.value_marks[prefix]
        return Mark(self.file, 1, 1)

    def written_at(self, path: KeyPath) -> str:
        """`file:line` of the key at `path`, for a message about another key; "its default"
        where no file writes it."""
        mark = self.key_marks.get(path)
        return f"{mark.file}:{mark.line}" if mark is not None else "its default"


class SpecLoader(yaml.SafeLoader):
    """SafeLoader that also reads YAML 1.2 floats such as 1e-5 (YAML 1.1 needs 1.0e-5)."""


SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                |\.[0-9_]+(?:[eE][-+][0-9]+)?
                |[-+]?\.(?:inf|Inf|INF)
                |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def _issue(file: str, line: int, column: int, message: str, path: str = "") -> SpecError:
    return SpecError([SpecIssue(file, line, column, path, message)])


def format_path(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def read_text(path: Path, display: str) -> str:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise _issue(display, 1, 1, "file not found") from None
    except OSError as exc:
        raise _issue(display, 1, 1, f"cannot read: {exc.strerror}") from None
    if not path.is_file():
        raise _issue(display, 1, 1, "not a regular file")
    if size > MAX_SPEC_BYTES:
        raise _issue(display, 1, 1, f"file is {size} bytes; a spec is at most {MAX_SPEC_BYTES}")
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise _issue(display, line, column, "file is not valid UTF-8") from None


def load_document(path: Path, display: str | None = None) -> PositionedDocument:
    shown = display or str(path)
    return parse_document(read_text(path, shown), shown)


def parse_document(text: str, display: str) -> PositionedDocument:
    try:
        loader = SpecLoader(text)
    except yaml.reader.ReaderError as exc:  # e.g. a control character
        line = text[: exc.position].count("\n") + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise _issue(display, line, column, f"invalid YAML: {exc.reason} "
                     f"(character {exc.character!r})") from None
    try:
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        raise _issue(display, line, column, f"invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise _issue(display, 1, 1, f"invalid YAML: {exc}") from None
    finally:
        loader.dispose()
    document = PositionedDocument(display, None, {}, {})
    if root is None:
        document.data = {}
        return document
    builder = _Builder(loader, document)
    document.data = builder.build(root, ())
    return document


MERGE_TAG = "tag:yaml.org,2002:merge"


class _Builder:
    def __init__(self, loader: SpecLoader, document: PositionedDocument) -> None:
        self.loader = loader
        self.document = document
        self.nodes = 0

    def _mark(self, node: yaml.Node) -> Mark:
        return Mark(self.document.file, node.start_mark.line + 1, node.start_mark.column + 1)

    def build(self, node: yaml.Node, path: KeyPath) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            mark = self._mark(node)
            raise _issue(mark.file, mark.line, mark.column,
                         f"more than {MAX_NODES} YAML nodes (an alias bomb?)", format_path(path))
        self.document.value_marks[path] = self._mark(node)
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, index)) for index, item in enumerate(node.value)]
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            mark = self._mark(node)
            raise _issue(mark.file, mark.line, mark.column, f"invalid value: {exc}",
                         format_path(path)) from None

    def _mapping(self, node: yaml.MappingNode, path: KeyPath) -> dict[str, Any]:
        # YAML merge keys (`<<: *anchor`): flatten_mapping puts the merged pairs first, and
        # a key written in the mapping itself overrides a merged one (as YAML 1.1 says);
        # only a key written twice in the mapping is a duplicate.
        explicit = sum(1 for key_node, _ in node.value if key_node.tag != MERGE_TAG)
        self.loader.flatten_mapping(node)
        merged = len(node.value) - explicit
        result: dict[str, Any] = {}
        written: set[str] = set()
        for index, (key_node, value_node) in enumerate(node.value):
            mark = self._mark(key_node)
            if not isinstance(key_node, yaml.ScalarNode):
                raise _issue(mark.file, mark.line, mark.column, "keys must be plain strings",
                             format_path(path))
            key = self.loader.construct_object(key_node)
            if not isinstance(key, str):
                raise _issue(mark.file, mark.line, mark.column,
                             f"key {key!r} must be a string", format_path(path))
            child = (*path, key)
            if index >= merged:
                if key in written:
                    first = self.document.key_marks[child]
                    raise _issue(mark.file, mark.line, mark.column,
                                 f"duplicate key (first at line {first.line})",
                                 format_path(child))
                written.add(key)
            self.document.key_marks[child] = mark
            result[key] = self.build(value_node, child)
        return result
