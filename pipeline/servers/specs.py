"""The spec as every command reads it: loaded, validated and described with the server
kinds of the registry (`KIND_SPECS`), which the spec layer below cannot import."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.servers.kinds import KIND_SPECS
from pipeline.spec import loading, models
from pipeline.spec.models import LoadedSpec, Spec


def load_spec(path: Path, environment: str | None = None) -> LoadedSpec:
    """Load, overlay and validate; raise SpecError with every issue found."""
    return loading.load_spec(path, environment, KIND_SPECS)


def validate_spec(data: Any) -> Spec:
    """A spec already merged (e.g. a release's spec blob); pydantic's ValidationError."""
    return models.validate_spec(data, KIND_SPECS)


def json_schema() -> dict[str, Any]:
    """The JSON schema of serve.yaml version 1, `server.kind` an enum of the kinds."""
    return models.json_schema(KIND_SPECS)
