"""The build stage's metrics (`stages/build.py`): the sizes of what will be served."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.outcomes.base import MetricsOutcome


@dataclass(frozen=True, kw_only=True)
class BuildOutcome(MetricsOutcome):
    artifact_bytes: float | None = None     # the packed artifact (model + server config)
    model_bytes: float | None = None        # the model file in it
