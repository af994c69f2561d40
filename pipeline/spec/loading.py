"""Load serve.yaml with its environment overlay: files, positions, deep merge, validation."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from pipeline.errors import SpecError, SpecIssue
from pipeline.spec.issues import issues_from_validation
from pipeline.spec.kind_specs import KindSpecs
from pipeline.spec.models import (
    ENVIRONMENT_ONLY_KEYS,
    NAME_PATTERN,
    EnvironmentPolicy,
    LoadedSpec,
    Spec,
    validate_spec,
)
from pipeline.spec.positions import KeyPath, PositionedDocument, load_document
from pipeline.spec.rules import semantic_issues


def environment_names(workspace: Path) -> list[str]:
    folder = workspace / "environments"
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def load_spec(path: Path, environment: str | None, kinds: KindSpecs) -> LoadedSpec:
    """Load, overlay and validate against the server `kinds`; raise SpecError with every
    issue found. Commands call `pipeline.servers.specs.load_spec`, which knows the kinds."""
    spec_path = path.resolve() if path.exists() else path
    workspace = spec_path.parent
    base = load_document(spec_path, display=_display(path))
    if not isinstance(base.data, dict):
        raise SpecError([SpecIssue(base.file, 1, 1, "", "the spec must be a mapping of keys")])
    documents = [base]
    policy_data: dict[str, Any] = {}
    if environment is not None:
        overlay = _load_overlay(workspace, environment, path)
        documents.append(overlay)
        policy_data = {k: overlay.data.pop(k) for k in ENVIRONMENT_ONLY_KEYS if k in overlay.data}
    merged = merge_documents(documents)
    issues: list[SpecIssue] = []
    spec: Spec | None = None
    try:
        spec = validate_spec(merged.data, kinds)
    except ValidationError as exc:
        blocks: dict[KeyPath, type[BaseModel]] = {
            ("server", name): kind.section for name, kind in kinds.items()
            if kind.section is not None}
        issues += issues_from_validation(exc, merged, Spec, hint_keys=_env_only_hint,
                                         blocks=blocks)
    policy = EnvironmentPolicy()
    if environment is not None:
        overlay_doc = documents[-1]
        try:
            policy = EnvironmentPolicy.model_validate(policy_data)
        except ValidationError as exc:
            # The policy keys were taken out of the overlay's data: judge them where they were.
            policy_doc = dataclasses.replace(overlay_doc, data=policy_data)
            issues += issues_from_validation(exc, policy_doc, EnvironmentPolicy)
    if spec is not None:
        issues += semantic_issues(spec, merged, workspace, kinds)
    if issues:
        raise SpecError(issues)
    assert spec is not None
    return LoadedSpec(spec, policy, environment, spec_path, workspace,
                      tuple(d.file for d in documents))


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _env_only_hint(key: str) -> str | None:
    if key in ENVIRONMENT_ONLY_KEYS:
        return f"'{key}' belongs in an environment overlay (environments/<env>.yaml)"
    return None


def _load_overlay(workspace: Path, environment: str, spec_path: Path) -> PositionedDocument:
    overlay_path = workspace / "environments" / f"{environment}.yaml"
    if not re.match(NAME_PATTERN, environment) or not overlay_path.is_file():
        known = environment_names(workspace)
        from difflib import get_close_matches

        close = get_close_matches(environment, known, n=1, cutoff=0.5)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        listed = ", ".join(known) if known else "none"
        raise SpecError([SpecIssue(
            _display(overlay_path), 1, 1, "",
            f"no environment '{environment}' next to {_display(spec_path)} "
            f"(known: {listed}){hint}")])
    document = load_document(overlay_path, display=_display(overlay_path))
    if document.data is None or document.data == {}:
        document.data = {}
    if not isinstance(document.data, dict):
        raise SpecError([SpecIssue(document.file, 1, 1, "",
                                   "an environment overlay must be a mapping of keys")])
    return document


def merge_documents(documents: list[PositionedDocument]) -> PositionedDocument:
    """Deep-merge mappings (later wins; a list replaces a list), keeping marks."""
    merged = PositionedDocument(documents[0].file, {}, {}, {})
    for document in documents:
        merged.data = _merge(merged.data, document.data)
        for path in _replaced_paths(document.data, ()):
            for marks in (merged.value_marks, merged.key_marks):
                for known in [p for p in marks if p[: len(path)] == path and len(p) > len(path)]:
                    del marks[known]
        merged.value_marks.update(document.value_marks)
        merged.key_marks.update(document.key_marks)
    return merged


def _merge(base: Any, overlay: Any) -> Any:
    if isinstance(base, dict) and isinstance(overlay, dict):
        out = dict(base)
        for key, value in overlay.items():
            out[key] = _merge(base[key], value) if key in base else value
        return out
    return overlay


def _replaced_paths(data: Any, path: KeyPath) -> list[KeyPath]:
    """Paths whose value replaces (rather than merges into) what was there."""
    if isinstance(data, dict):
        out: list[KeyPath] = []
        for key, value in data.items():
            out += _replaced_paths(value, (*path, key))
        return out
    return [path]
