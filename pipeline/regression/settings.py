"""The paired verdict's settings, from the spec's `stages.regression`."""

from __future__ import annotations

from pipeline.regression.paired import PairedSettings, Schedule
from pipeline.spec.stage_settings import RegressionStage

# The default `tail_allowance`: this share of slo.p99 (a tail change smaller than that is
# immaterial to the SLO, and smaller than a busy machine's scheduling delays).
TAIL_ALLOWANCE_OF_SLO = 0.02


def tail_allowance_ms(stage: RegressionStage, slo_p99_ms: float) -> float:
    """The spec's `tail_allowance`, or its default: TAIL_ALLOWANCE_OF_SLO of slo.p99."""
    if stage.tail_allowance is not None:
        return stage.tail_allowance.ms
    return TAIL_ALLOWANCE_OF_SLO * slo_p99_ms


def paired_settings(stage: RegressionStage, slo_p99_ms: float) -> PairedSettings:
    return PairedSettings(
        metrics=tuple(dict.fromkeys(stage.watch)), margin=stage.margin.fraction,
        error_rate_allowance=stage.error_rate_margin.fraction,
        confidence=stage.confidence.fraction,
        schedule=Schedule(min(stage.first_look, stage.max_rounds), stage.look_every,
                          stage.max_rounds),
        tail_allowance_ms=tail_allowance_ms(stage, slo_p99_ms))
