"""One preflight check's result, and the error that carries every failed one."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pipeline.errors import PipelineError, PolicyError, StoreError, UsageError

CheckStatus = Literal["ok", "failed", "skipped"]

# Exit kinds a failed check carries (pipeline/errors.py): a setup or spec that cannot
# work is a usage error, the release store is a store error, a missing release is policy.
SETUP = UsageError.exit_code
STORE = StoreError.exit_code
POLICY = PolicyError.exit_code
# Most serious first: a run that cannot even start, then the store, then the policy.
SEVERITY = (SETUP, STORE, POLICY)


@dataclass(frozen=True)
class Check:
    name: str
    status: CheckStatus
    detail: str
    exit_kind: int = 0

    @classmethod
    def ok(cls, name: str, detail: str) -> Check:
        return cls(name, "ok", detail)

    @classmethod
    def failed(cls, name: str, detail: str, exit_kind: int = SETUP) -> Check:
        return cls(name, "failed", detail, exit_kind)

    @classmethod
    def skipped(cls, name: str, detail: str) -> Check:
        return cls(name, "skipped", detail)

    def line(self) -> str:
        return f"{self.name}: {self.detail}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def most_serious(checks: Iterable[Check]) -> int:
    """The exit code of the most serious failed check; 0 when none failed."""
    kinds = {check.exit_kind for check in checks if check.status == "failed"}
    if not kinds:
        return 0
    return next((kind for kind in SEVERITY if kind in kinds), max(kinds))


class PreflightFailed(PipelineError):
    """A run would fail later: each problem on its own line, nothing started or written."""

    def __init__(self, checks: list[Check]) -> None:
        self.checks = [check for check in checks if check.status == "failed"]
        self.exit_code = most_serious(self.checks)
        super().__init__("; ".join(check.line() for check in self.checks))

    def lines(self) -> list[str]:
        return [f"preflight: {check.line()}" for check in self.checks]
