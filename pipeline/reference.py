"""The trusted reference: the source model, run in the pipeline's own process."""

from __future__ import annotations

from pipeline.config import LoadedSpec
from pipeline.errors import PipelineError
from pipeline.model_runtime import LoadedModel


def load_reference(loaded: LoadedSpec) -> LoadedModel:
    model = loaded.spec.model
    if model.source.path is None:
        raise PipelineError("model.source: DVC sources are not supported by this version")
    entrypoint = None
    if model.entrypoint is not None:
        file_part, _, attribute = model.entrypoint.rpartition(":")
        entrypoint = f"{loaded.resolve(file_part)}:{attribute}"
    try:
        return LoadedModel(model.format, loaded.resolve(model.source.path),
                           [t.name for t in model.outputs], entrypoint=entrypoint,
                           trusted=model.trusted)
    except Exception as exc:  # any loader error is the user's model, reported in one line
        raise PipelineError(f"model.source: cannot load {model.source.path} as "
                            f"{model.format}: {type(exc).__name__}: {exc}") from None
