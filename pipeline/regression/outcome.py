"""The three outcomes of a regression verdict."""

from __future__ import annotations

from typing import Literal

from pipeline.stage_result import GateOutcome

Outcome = Literal["no_regression", "regression", "inconclusive"]
OUTCOMES: tuple[Outcome, ...] = ("no_regression", "regression", "inconclusive")
# How a verdict reads as a gate: only a clear "no regression" passes.
GATE_OUTCOME: dict[Outcome, GateOutcome] = {"no_regression": GateOutcome.PASSED,
                                            "regression": GateOutcome.FAILED,
                                            "inconclusive": GateOutcome.INCONCLUSIVE}
