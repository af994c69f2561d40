"""What a stage returns: status, gates (observed vs threshold), metrics, artifacts.

One stage's result; `pipeline/record.py` is the run record on disk, which holds every
stage's result of a run (`RunRecord.stages`) and reads old records back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Final, cast


class Status(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    ABORTED = "aborted"
    UNKNOWN = "unknown"       # read from a record that did not say (never produced by a run)


class GateOutcome(str, Enum):
    """How a gate was decided. A `str` so records, reports and older callers that compare
    it with "passed" keep working; `str()` and f-strings give the value."""

    PASSED = "passed"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"    # the evidence decided neither way

    def __str__(self) -> str:
        return self.value

    def __format__(self, format_spec: str) -> str:
        return format(self.value, format_spec)


class RunStatus(str, Enum):
    """A whole run's status in its record: running until every stage has a result.

    `abandoned` is never written by a run: a reader gives it to a record left `running` by
    a process that is gone (`pipeline.abandoned_runs`)."""

    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"
    ABANDONED = "abandoned"

    def __str__(self) -> str:
        return self.value

    def __format__(self, format_spec: str) -> str:
        return format(self.value, format_spec)


GATE_OUTCOMES: Final = tuple(outcome.value for outcome in GateOutcome)
# The constructor's default: the outcome follows `passed` (a gate with no interval).
_FROM_PASSED: Final = cast(GateOutcome, "")


@dataclass(frozen=True)
class Gate:
    """One observed value compared with one threshold from the spec.

    `outcome` is passed, failed or inconclusive (the evidence decided neither way);
    `passed` stays for readers of older records and is true only for "passed".
    A gate decided on a confidence interval records it (`interval`, [low, high],
    None for a side with no bound) and the number of `samples` behind it.
    """

    name: str
    observed: float | str | None
    threshold: float | str | None
    passed: bool
    comparison: str = ""
    unit: str = ""
    outcome: GateOutcome = _FROM_PASSED
    interval: tuple[float | None, float | None] | None = None
    samples: int | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        given = self.outcome or ("passed" if self.passed else "failed")
        if given not in GATE_OUTCOMES or self.passed != (given == "passed"):
            raise ValueError(f"gate {self.name}: outcome {given!r} with passed={self.passed}")
        object.__setattr__(self, "outcome", GateOutcome(given))
        if self.interval is not None:
            object.__setattr__(self, "interval", (self.interval[0], self.interval[1]))

    @classmethod
    def decided(cls, name: str, observed: float, threshold: float, outcome: str,
                comparison: str, unit: str, interval: tuple[float | None, float | None],
                samples: int, reason: str) -> Gate:
        """A gate decided on a confidence interval rather than on the observed value."""
        decided = GateOutcome(outcome)
        return cls(name, observed, threshold, decided is GateOutcome.PASSED, comparison, unit,
                   decided, interval, samples, reason)

    @classmethod
    def at_most(cls, name: str, observed: float, threshold: float, unit: str = "") -> Gate:
        return cls(name, observed, threshold, observed <= threshold, "<=", unit)

    @classmethod
    def at_least(cls, name: str, observed: float, threshold: float, unit: str = "") -> Gate:
        return cls(name, observed, threshold, observed >= threshold, ">=", unit)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Gate:
        """A gate as stored; older records lack `outcome` (then `passed` decides) and the
        interval fields, and odd values load as missing rather than fail."""
        outcome = body.get("outcome")
        if outcome not in GATE_OUTCOMES:
            outcome = "passed" if body.get("passed") is True else "failed"
        raw_interval = body.get("interval")
        interval = None
        if isinstance(raw_interval, list | tuple) and len(raw_interval) == 2:
            interval = (finite(raw_interval[0]), finite(raw_interval[1]))
        samples = finite(body.get("samples"))
        return cls(str(body.get("name", "?")), _scalar(body.get("observed")),
                   _scalar(body.get("threshold")), outcome == "passed",
                   str(body.get("comparison") or ""), str(body.get("unit") or ""),
                   GateOutcome(outcome),
                   interval, None if samples is None else int(samples),
                   str(body.get("reason") or ""))

    def worse_on_observed(self) -> bool:
        """The observed value misses the threshold (False when either is not a number)."""
        if not _is_number(self.observed) or not _is_number(self.threshold):
            return False
        observed, threshold = float(self.observed), float(self.threshold)  # type: ignore[arg-type]
        if self.comparison == "<=":
            return observed > threshold
        if self.comparison == ">=":
            return observed < threshold
        return False

    def describe(self) -> str:
        def show(value: float | str | None) -> str:
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


def finite(value: Any) -> float | None:
    """A finite JSON number as float; None for anything else (bools included)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    result = float(value)
    return result if math.isfinite(result) else None


def _scalar(value: Any) -> float | str | None:
    if value is None or isinstance(value, int | float | str):
        return value
    return str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class Artifact:
    path: str
    sha256: str
    size: int


# Where a stage's exit code is stored in record.json (inside `details`, as it always was).
EXIT_CODE_KEY: Final = "exit_code"


@dataclass
class StageResult:
    """One stage's result. `exit_code` is the exit code of the error that failed it (None
    when it ran to a verdict); record.json keeps it in `details` as it always has."""

    name: str
    status: Status
    message: str = ""
    duration_s: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    gates: list[Gate] = field(default_factory=list)
    artifacts: dict[str, Artifact] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None

    @classmethod
    def judged(cls, name: str, gates: list[Gate], passed_message: str,
               metrics: dict[str, float] | None = None,
               details: dict[str, Any] | None = None,
               accept_inconclusive: bool = False) -> StageResult:
        """Passed when every gate passed; otherwise failed, naming the failed gates.

        An inconclusive gate fails the stage too, unless the spec accepted that
        outcome; then the stage passes and its message still names the gate. An accepted
        inconclusive gate whose observed value is worse than its threshold still fails:
        the evidence, undecided as it is, leans towards a miss.
        """
        accepted = [gate for gate in gates if gate.outcome == "inconclusive" and
                    accept_inconclusive and not gate.worse_on_observed()]
        failed = [gate for gate in gates if gate.outcome != "passed" and gate not in accepted]
        message = "; ".join(gate.describe() for gate in failed) if failed else passed_message
        if accepted and not failed:
            message += "; accepted as inconclusive: " + "; ".join(g.describe() for g in accepted)
        return cls(name, Status.FAILED if failed else Status.PASSED, message,
                   metrics=dict(metrics or {}), gates=gates, details=dict(details or {}))

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        del body["exit_code"]
        body["status"] = self.status.value
        for gate in body["gates"]:
            gate["outcome"] = GateOutcome(gate["outcome"]).value
        if self.exit_code is not None:
            body["details"][EXIT_CODE_KEY] = self.exit_code
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> StageResult:
        """A stage as stored. Missing or oddly typed parts load empty (a record may come from
        an aborted run, an older version or a release's verification), never fail."""
        status = body.get("status")
        metrics = body.get("metrics")
        gates = body.get("gates")
        artifacts = body.get("artifacts")
        details = body.get("details")
        duration = finite(body.get("duration_s"))
        details = dict(details) if isinstance(details, Mapping) else {}
        exit_code = details.get(EXIT_CODE_KEY)
        if isinstance(exit_code, bool) or not isinstance(exit_code, int):
            exit_code = None
        details.pop(EXIT_CODE_KEY) if exit_code is not None else None
        return cls(
            name=str(body.get("name", "?")),
            status=Status(status) if status in Status._value2member_map_ else Status.UNKNOWN,
            message=str(body.get("message") or ""),
            duration_s=0.0 if duration is None else duration,
            metrics={str(key): value for key, value in metrics.items() if _is_number(value)}
            if isinstance(metrics, Mapping) else {},
            gates=[Gate.from_json(gate) for gate in gates if isinstance(gate, Mapping)]
            if isinstance(gates, list) else [],
            artifacts={str(key): Artifact(str(value.get("path", "")),
                                          str(value.get("sha256", "")),
                                          int(finite(value.get("size")) or 0))
                       for key, value in artifacts.items() if isinstance(value, Mapping)}
            if isinstance(artifacts, Mapping) else {},
            details=details,
            exit_code=exit_code,
        )

    def finite_metrics(self) -> dict[str, float]:
        """The metrics that are finite numbers, as floats."""
        return {key: number for key, raw in self.metrics.items()
                if (number := finite(raw)) is not None}
