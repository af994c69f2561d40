"""Percentiles and the mean read with numpy are hdrh's own, bucket for bucket."""

from __future__ import annotations

import random

import pytest

from pipeline.measure import histogram_reads
from pipeline.measure.load_result import new_histogram

PERCENTILES = (0.0, 1.0, 50.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0)


@pytest.mark.parametrize("seed", range(6))
def test_percentiles_and_mean_are_hdrhs(seed: int) -> None:
    rng = random.Random(seed)
    histogram = new_histogram()
    for _ in range(rng.choice((1, 7, 500, 5000))):
        # Microseconds to an hour: every magnitude of bucket, with ties.
        histogram.record_value(rng.choice((rng.randint(1, 3000), rng.randint(1, 3_600_000_000),
                                           1500)))
    found = histogram_reads.percentiles(histogram, PERCENTILES)
    for percentile in PERCENTILES:
        assert found[percentile] == histogram.get_value_at_percentile(percentile), percentile
    assert histogram_reads.mean(histogram) == pytest.approx(histogram.get_mean_value(),
                                                            rel=1e-12)


def test_an_empty_histogram_reads_zero() -> None:
    histogram = new_histogram()
    assert histogram_reads.percentiles(histogram, [50.0, 99.0]) == {50.0: 0, 99.0: 0}
    assert histogram_reads.mean(histogram) == 0.0
