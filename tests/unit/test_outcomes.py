"""Typed stage outcomes: every watched metric is a field, and the metrics of records written
by earlier versions (`data/record_*.json`) load and are written back with the same keys and
values, so record.json keeps its shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline import metric_names as m
from pipeline.outcomes.base import MetricsOutcome
from pipeline.outcomes.build import BuildOutcome
from pipeline.outcomes.latency import LatencyOutcome
from pipeline.outcomes.parity import ParityOutcome
from pipeline.outcomes.publish import UploadOutcome
from pipeline.outcomes.readiness import ReadinessOutcome
from pipeline.outcomes.saturation import SaturationOutcome

DATA = Path(__file__).parent / "data"
RECORDS = sorted(path.name for path in DATA.glob("record_*.json"))
OUTCOMES: dict[str, type[MetricsOutcome]] = {"build": BuildOutcome,
                                             "publish": UploadOutcome,
                                             m.READINESS_STAGE: ReadinessOutcome,
                                             m.PARITY_STAGE: ParityOutcome,
                                             m.LATENCY_STAGE: LatencyOutcome,
                                             m.SATURATION_STAGE: SaturationOutcome}


def stage_metrics(record: str, stage: str) -> dict[str, Any]:
    body = json.loads((DATA / record).read_text())
    found = [s["metrics"] for s in body["stages"] if s["name"] == stage]
    assert found, f"{record} has no {stage} stage"
    metrics: dict[str, Any] = found[0]
    return metrics


def test_every_watchable_metric_is_a_field_of_its_stage_outcome() -> None:
    assert set(m.LATENCY) <= set(LatencyOutcome.names())
    assert set(m.SATURATION) <= set(SaturationOutcome.names())
    assert {m.KNEE_LOWER_BOUND, m.CAPACITY_LOWER_BOUND, m.BURST_RATE_RPS} <= set(
        SaturationOutcome.names())
    assert {m.COLD_START_S, m.COLD_RSS_MB} == set(ReadinessOutcome.names())
    assert {m.QUEUE_BUDGET_US, m.SERVER_AVG_BATCH_SIZE, m.VERDICT_S} <= set(
        LatencyOutcome.names())


@pytest.mark.parametrize("record", RECORDS)
@pytest.mark.parametrize("stage", sorted(OUTCOMES))
def test_stored_metrics_load_and_are_written_back_unchanged(record: str, stage: str) -> None:
    stored = stage_metrics(record, stage)
    outcome = OUTCOMES[stage].from_json(stored)
    assert outcome.to_json() == stored
    assert list(outcome.to_json()) == [
        *(name for name in outcome.names() if name in stored),
        *(name for name in stored if name not in outcome.names())]


def test_every_stored_metric_of_these_stages_has_a_field() -> None:
    for record in RECORDS:
        for stage in ("build", "publish", m.READINESS_STAGE, m.PARITY_STAGE):
            assert not OUTCOMES[stage].from_json(stage_metrics(record, stage)).extra


def test_fields_read_the_stored_values_and_unknown_names_are_kept() -> None:
    stored = stage_metrics("record_main.json", m.LATENCY_STAGE)
    latency = LatencyOutcome.from_json(stored)
    assert latency.p99_ms == stored[m.P99_MS] and latency.p99_ms is not None
    assert latency.server_queue_us == stored[m.SERVER_QUEUE_US]
    assert latency.extra["p99_low_ms"] == stored["p99_low_ms"]
    saturation = SaturationOutcome.from_json(
        stage_metrics("record_main.json", m.SATURATION_STAGE))
    assert saturation.knee_concurrency is not None and saturation.knee_concurrency >= 1


def test_an_old_record_without_a_metric_loads_it_as_missing() -> None:
    stored = stage_metrics("record_triton.json", m.SATURATION_STAGE)
    assert m.CAPACITY_RPS not in stored
    saturation = SaturationOutcome.from_json(stored)
    assert saturation.capacity_rps is None and m.CAPACITY_RPS not in saturation.to_json()


def test_values_that_are_not_finite_numbers_load_as_missing() -> None:
    latency = LatencyOutcome.from_json({m.P99_MS: "12", m.P50_MS: float("nan"),
                                        m.MAX_MS: True, m.MEAN_MS: 3, "p99_low_ms": None})
    assert latency.p99_ms is None and latency.p50_ms is None and latency.max_ms is None
    assert latency.to_json() == {m.MEAN_MS: 3.0}
