"""The paired verdict's settings, from the spec's `stages.regression`."""

from __future__ import annotations

from pipeline.regression.paired import PairedSettings, Schedule
from pipeline.spec.stage_settings import RegressionStage


def paired_settings(stage: RegressionStage) -> PairedSettings:
    return PairedSettings(
        metrics=tuple(dict.fromkeys(stage.watch)), margin=stage.margin.fraction,
        error_rate_allowance=stage.error_rate_margin.fraction,
        confidence=stage.confidence.fraction,
        schedule=Schedule(min(stage.first_look, stage.max_rounds), stage.look_every,
                          stage.max_rounds))
