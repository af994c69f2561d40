"""Where a setting of a loaded spec comes from: the environment's overlay or the spec file.

Policy refusals name the file to change, so that the reader does not have to work out
the deep merge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pipeline.spec.models import LoadedSpec


def overlay_file(environment: str) -> str:
    return f"environments/{environment}.yaml"


def _sets(path: Path, dotted: str) -> bool:
    try:
        data: Any = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return False
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True


def configured_in(loaded: LoadedSpec, environment: str, dotted: str) -> str:
    """`environments/<env>.yaml: <key>` when the overlay sets the key, else `<spec>: <key>`."""
    overlay = loaded.workspace / "environments" / f"{environment}.yaml"
    if _sets(overlay, dotted):
        return f"{overlay_file(environment)}: {dotted}"
    return f"{loaded.path.name}: {dotted}"
