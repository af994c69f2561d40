"""The trusted reference: the source model, run in the pipeline's own process."""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.model.runtime import LoadedModel
from pipeline.spec.models import LoadedSpec


def load_reference(loaded: LoadedSpec, model_file: Path) -> LoadedModel:
    model = loaded.spec.model
    entrypoint = None
    if model.entrypoint is not None:
        file_part, _, attribute = model.entrypoint.rpartition(":")
        entrypoint = f"{loaded.resolve(file_part)}:{attribute}"
    try:
        return LoadedModel(model.format, model_file,
                           [t.name for t in model.outputs], entrypoint=entrypoint,
                           trusted=model.trusted)
    except Exception as exc:  # any loader error is the user's model, reported in one line
        raise PipelineError(f"model.source: cannot load {model.source.describe()} as "
                            f"{model.format}: {type(exc).__name__}: {exc}") from None
