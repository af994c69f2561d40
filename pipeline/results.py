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


@dataclass(frozen=True)
class Gate:
    """One observed value compared with one threshold from the spec."""

    name: str
    observed: float | str
    threshold: float | str
    passed: bool
    comparison: str = ""
    unit: str = ""

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

        verdict = "ok" if self.passed else "FAILED"
        relation = f" {self.comparison} " if self.comparison else " vs "
        return f"{self.name}: {show(self.observed)}{relation}{show(self.threshold)} ({verdict})"


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
               details: dict[str, Any] | None = None) -> StageResult:
        """Passed when every gate passed; otherwise failed, naming the failed gates."""
        failed = [gate for gate in gates if not gate.passed]
        message = "; ".join(gate.describe() for gate in failed) if failed else passed_message
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
