"""The trusted reference: the source model, run in the pipeline's own process."""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.model.runtime import Array, LoadedModel, UnservableOutput
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
                           trusted=model.trusted, input_names=[t.name for t in model.inputs])
    except Exception as exc:  # any loader error is the user's model, reported in one line
        raise PipelineError(f"model.source: cannot load {model.source.describe()} as "
                            f"{model.format}: {type(exc).__name__}: {exc}") from None


def one_line(message: str, limit: int = 300) -> str:
    """An exception's text in one line of at most `limit` characters. A long text of many
    lines keeps its last one whole: TorchScript's interpreter puts the cause ("index out of
    range in self") after a serialized-code traceback of a thousand characters or more."""
    text = " ".join(message.split())
    if len(text) <= limit:
        return text
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    last = " ".join(lines[-1].split())[: limit // 2] if len(lines) > 1 else ""
    head = limit - len(last) - 3
    return f"{text[:head]}… {last}" if last else text[: limit - 1] + "…"


class ReferenceFailed(PipelineError):
    """The reference raised on a batch parity sent: its expected outputs do not exist."""

    def __init__(self, label: str, exc: BaseException) -> None:
        text = one_line(str(exc))
        self.label = label
        self.raised = not isinstance(exc, UnservableOutput)
        if not self.raised:           # the model ran; its answer is what cannot be held
            self.error = text
            super().__init__(f"on {label}, {text}")
            return
        self.error = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        super().__init__(f"the reference raised on {label}: {self.error}")


def expected_outputs(reference: LoadedModel, inputs: list[Array], label: str) -> list[Array]:
    """The reference's outputs for one batch; ReferenceFailed (one line) if it raises."""
    try:
        return reference(inputs)
    except Exception as exc:  # the user's model: whatever it raises is reported, not thrown
        raise ReferenceFailed(label, exc) from None
