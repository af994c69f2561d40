"""Where a key of a loaded spec is set: `file:line`, read again from the spec and its
environment overlay (the overlay wins, as in the merge), for messages about a value that
only turns out wrong at run time (a port someone else holds)."""

from __future__ import annotations

from pipeline.errors import SpecError
from pipeline.spec.models import LoadedSpec
from pipeline.spec.positions import KeyPath, load_document


def key_location(loaded: LoadedSpec, path: KeyPath) -> str:
    """`file:line` of the key at `path` in the file that set it last; the spec's file
    alone when no file names it (or a file can no longer be read)."""
    sources = [loaded.path]
    if loaded.environment is not None:
        sources.append(loaded.workspace / "environments" / f"{loaded.environment}.yaml")
    found = loaded.files[0] if loaded.files else str(loaded.path)
    for source, shown in zip(sources, loaded.files, strict=False):
        try:
            marks = load_document(source, display=shown).key_marks
        except SpecError:
            continue
        if path in marks:
            found = f"{shown}:{marks[path].line}"
    return found
