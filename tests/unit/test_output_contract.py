"""parity.output_contract and parity.finite_outputs: fail on their threshold, pass inside."""

from __future__ import annotations

import numpy as np

from pipeline.model.contract import ContractCheck
from pipeline.model.nonfinite import FiniteCheck
from pipeline.spec.models import OutputSpec

SCORES = OutputSpec(name="scores", dtype="float32", shape=[4])


def test_the_declared_shape_passes_and_one_value_short_fails() -> None:
    good = ContractCheck([SCORES])
    for side in ("served", "reference"):
        good.check(side, {"scores": np.zeros((2, 4), np.float32)}, 2, "sample batch 1 of 1")
    assert good.gate().passed
    assert good.gate().observed == "scores float32 [n, 4]"       # what came, measured

    short = ContractCheck([SCORES])
    short.check("served", {"scores": np.zeros((2, 3), np.float32)}, 2, "sample batch 1 of 1")
    short.check("reference", {"scores": np.zeros((2, 4), np.float32)}, 2, "sample batch 1 of 1")
    gate = short.gate()
    assert not gate.passed and "scores: declared" in str(gate.observed)
    assert "[n, 3]" in str(gate.observed)


def test_the_observed_value_is_what_the_server_answered() -> None:
    varying = ContractCheck([OutputSpec(name="logits", dtype="float32", shape=[-1])])
    for size in (3, 5, 7):
        varying.check("served", {"logits": np.zeros((2, size), np.float64)}, 2, "b")
        varying.check("reference", {"logits": np.zeros((2, size), np.float32)}, 2, "b")
    gate = varying.gate()
    assert gate.passed and gate.threshold == "logits float32 [n, -1]"
    assert gate.observed == "logits float64 [n, 3], float64 [n, 5] … (3 forms)"


def test_a_missing_output_and_no_answers_fail() -> None:
    missing = ContractCheck([SCORES])
    missing.check("served", {}, 2, "sample batch 1 of 1")
    missing.check("reference", {"scores": np.zeros((2, 4), np.float32)}, 2, "b")
    assert not missing.gate().passed and "missing" in str(missing.gate().observed)
    assert not ContractCheck([SCORES]).gate().passed     # nothing checked: fails closed


def test_one_nan_fails_unless_the_output_allows_it() -> None:
    values = np.zeros((2, 4), np.float32)
    values[0, 0] = np.nan
    refused = FiniteCheck([SCORES])
    refused.check("served", {"scores": values})
    gate = refused.gate()
    assert not gate.passed and gate.observed == 1.0 and "1 NaN" in gate.reason

    clean = FiniteCheck([SCORES])
    clean.check("served", {"scores": np.zeros((2, 4), np.float32)})
    assert clean.gate().passed

    allowed = FiniteCheck([SCORES.model_copy(update={"allow_nonfinite": True})])
    allowed.check("served", {"scores": values})
    assert allowed.gate().passed
    assert not FiniteCheck([SCORES]).gate().passed       # nothing checked: fails closed
