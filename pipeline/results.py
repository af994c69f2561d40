"""What a stage returns: status, gates (observed vs threshold), metrics, artifacts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    ABORTED = "aborted"


GATE_OUTCOMES = ("passed", "failed", "inconclusive")


@dataclass(frozen=True)
class Gate:
    """One observed value compared with one threshold from the spec.

    `outcome` is passed, failed or inconclusive (the evidence decided neither way);
    `passed` stays for readers of older records and is true only for "passed".
    A gate decided on a confidence interval records it (`interval`, [low, high],
    None for a side with no bound) and the number of `samples` behind it.
    """

    name: str
    observed: float | str
    threshold: float | str
    passed: bool
    comparison: str = ""
    unit: str = ""
    outcome: str = ""
    interval: tuple[float | None, float | None] | None = None
    samples: int | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        outcome = self.outcome or ("passed" if self.passed else "failed")
        if outcome not in GATE_OUTCOMES or self.passed != (outcome == "passed"):
            raise ValueError(f"gate {self.name}: outcome {outcome!r} with passed={self.passed}")
        object.__setattr__(self, "outcome", outcome)
        if self.interval is not None:
            object.__setattr__(self, "interval", (self.interval[0], self.interval[1]))

    @classmethod
    def decided(cls, name: str, observed: float, threshold: float, outcome: str,
                comparison: str, unit: str, interval: tuple[float | None, float | None],
                samples: int, reason: str) -> Gate:
        """A gate decided on a confidence interval rather than on the observed value."""
        return cls(name, observed, threshold, outcome == "passed", comparison, unit,
                   outcome, interval, samples, reason)

    @classmethod
    def at_most(cls, name: str, observed: float, threshold: float, unit: str = "") -> Gate:
        return cls(name, observed, threshold, observed <= threshold, "<=", unit)

    @classmethod
    def at_least(cls, name: str, observed: float, threshold: float, unit: str = "") -> Gate:
        return cls(name, observed, threshold, observed >= threshold, ">=", unit)

    def describe(self) -> str:
        def show(value: float | str) -> str:
            if isinstance(value, float):
                return f"{value:.4g}{self.unit}"
            return f"{value}{self.unit if isinstance(value, int) else ''}"

        verdict = {"passed": "ok", "failed": "FAILED"}.get(self.outcome, self.outcome.upper())
        relation = f" {self.comparison} " if self.comparison else " vs "
        text = f"{self.name}: {show(self.observed)}{relation}{show(self.threshold)} ({verdict}"
        if self.interval is not None:
            text += f", interval {self.describe_interval()}"
        if self.samples is not None:
            text += f", n={self.samples}"
        text += ")"
        return text + (f": {self.reason}" if self.reason and not self.passed else "")

    def describe_interval(self) -> str:
        """[low, high] with the unit; "-" for a side without a bound; "" when none."""
        if self.interval is None:
            return ""
        low, high = (("-" if v is None else f"{v:.4g}") for v in self.interval)
        return f"[{low}, {high}]{self.unit}"


@dataclass(frozen=True)
class Artifact:
    path: str
    sha256: str
    size: int


@dataclass
class StageResult:
    name: str
    status: Status
    message: str = ""
    duration_s: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    gates: list[Gate] = field(default_factory=list)
    artifacts: dict[str, Artifact] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def judged(cls, name: str, gates: list[Gate], passed_message: str,
               metrics: dict[str, float] | None = None,
               details: dict[str, Any] | None = None,
               accept_inconclusive: bool = False) -> StageResult:
        """Passed when every gate passed; otherwise failed, naming the failed gates.

        An inconclusive gate fails the stage too, unless the spec accepted that
        outcome; then the stage passes and its message still names the gate.
        """
        failed = [gate for gate in gates if gate.outcome == "failed" or
                  (gate.outcome == "inconclusive" and not accept_inconclusive)]
        accepted = [gate for gate in gates if gate.outcome == "inconclusive" and
                    accept_inconclusive]
        message = "; ".join(gate.describe() for gate in failed) if failed else passed_message
        if accepted and not failed:
            message += "; accepted as inconclusive: " + "; ".join(g.describe() for g in accepted)
        return cls(name, Status.FAILED if failed else Status.PASSED, message,
                   metrics=dict(metrics or {}), gates=gates, details=dict(details or {}))

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["status"] = self.status.value
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> StageResult:
        return cls(
            name=body["name"], status=Status(body["status"]), message=body.get("message", ""),
            duration_s=body.get("duration_s", 0.0), metrics=dict(body.get("metrics", {})),
            gates=[Gate(**gate) for gate in body.get("gates", [])],
            artifacts={k: Artifact(**v) for k, v in body.get("artifacts", {}).items()},
            details=dict(body.get("details", {})),
        )
