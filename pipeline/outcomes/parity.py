"""The parity stage's metrics (`stages/parity.py`): served outputs against the reference,
the same batches sent again, and the failure probes sent."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.outcomes.base import MetricsOutcome


@dataclass(frozen=True, kw_only=True)
class ParityOutcome(MetricsOutcome):
    parity_requests: float | None = None
    parity_elements: float | None = None
    parity_mismatched: float | None = None
    parity_max_abs_error: float | None = None
    parity_max_rel_error: float | None = None
    parity_repeated_elements: float | None = None
    parity_repeat_differing: float | None = None
    parity_repeat_max_abs: float | None = None
    parity_nonfinite: float | None = None
    parity_contract_breaches: float | None = None
    failure_probes: float | None = None
