"""Parity sends every sample (the first alone, all of them in full batches) and holds an
item's answer alone to its rows in those batches (parity.batch_invariant)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pipeline.model.batch_invariance import BatchInvariance
from pipeline.servers.specs import load_spec
from stages.parity import SINGLE_ITEMS, sample_batches


def batches_for(project: Path, samples: int, max_batch_size: int) -> list[tuple[int, ...]]:
    spec = load_spec(project / "serve.yaml", None).spec
    spec = spec.model_copy(update={"server": spec.server.model_copy(update={
        "batching": spec.server.batching.model_copy(update={"max_batch_size": max_batch_size})})})
    features = np.arange(samples * 16, dtype=np.float32).reshape(samples, 16)
    return [b.samples for b in sample_batches(spec, [(None, {"features": features})])]


def test_every_sample_is_sent_and_the_first_batch_is_full(project: Path) -> None:
    sent = batches_for(project, 100, 32)
    assert sent[:SINGLE_ITEMS] == [(i,) for i in range(SINGLE_ITEMS)]
    assert [len(b) for b in sent[SINGLE_ITEMS:]] == [32, 32, 32, 4]
    assert sorted(i for b in sent[SINGLE_ITEMS:] for i in b) == list(range(100))


def test_fewer_samples_than_a_batch_wrap_round_to_fill_it(project: Path) -> None:
    sent = batches_for(project, 5, 8)
    assert sent == [(0,), (1,), (2,), (3,), (4,), (0, 1, 2, 3, 4, 0, 1, 2)]


def test_without_batching_every_sample_goes_alone_once(project: Path) -> None:
    assert batches_for(project, 12, 1) == [(i,) for i in range(12)]


def answers(rows: np.ndarray[Any, Any]) -> dict[str, np.ndarray[Any, Any]]:
    return {"scores": rows.astype(np.float32)}


def test_an_answer_that_depends_on_the_batch_fails() -> None:
    items = np.arange(12, dtype=np.float32).reshape(3, 4)
    check = BatchInvariance(atol=1e-5, rtol=1e-4)
    for index in range(3):
        check.single(None, index, answers(items[index:index + 1]))
    check.batch(None, [0, 1, 2], answers(items), "sample batch 4 of 4")
    assert check.gate().passed and check.compared == 12
    shifted = items - items.mean(axis=0, keepdims=True)
    check.batch(None, [0, 1, 2], answers(shifted), "sample batch 5 of 5")
    gate = check.gate()
    assert not gate.passed and gate.observed == 12.0
    assert "the first in sample batch 5 of 5 scores row 1 (|Δ| 7)" in gate.reason
    assert "depends on the other items in its batch" in gate.reason


def test_rounding_within_the_tolerance_passes_and_no_batch_is_not_a_failure() -> None:
    check = BatchInvariance(atol=1e-5, rtol=1e-4)
    assert check.gate().passed        # max_batch_size 1: nothing to compare
    check.single(None, 0, answers(np.array([[1.0, 2.0]])))
    check.batch(None, [0, 0], answers(np.array([[1.0 + 1e-7, 2.0], [1.0, 2.0 - 1e-7]])), "b")
    assert check.gate().passed and check.differing == 0
