"""One error base with an exit code per kind; the CLI catches it in one place."""

from __future__ import annotations

from dataclasses import dataclass


class PipelineError(Exception):
    """An expected failure with a one-line message for humans and an exit code."""

    exit_code = 1

    def lines(self) -> list[str]:
        return [str(self)]


@dataclass(frozen=True)
class SpecIssue:
    file: str
    line: int
    column: int
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class SpecError(PipelineError):
    """The spec or an environment overlay is invalid."""

    exit_code = 2

    def __init__(self, issues: list[SpecIssue]) -> None:
        self.issues = issues
        super().__init__("; ".join(str(issue) for issue in issues))

    def lines(self) -> list[str]:
        return [str(issue) for issue in self.issues]


class UsageError(PipelineError):
    """A command was called with arguments that cannot work (unknown run id, no release)."""

    exit_code = 2


class StoreError(PipelineError):
    """The release store is unreachable, inconsistent or refused an operation."""

    exit_code = 3


class ConflictError(StoreError):
    """A compare-and-swap lost a race: someone else changed the pointer first."""

    exit_code = 4


class PolicyError(PipelineError):
    """An environment's policy refuses the move (no approval, not passed where required)."""

    exit_code = 5


class ServerError(PipelineError):
    """A model server failed to start, became unready or died."""


class PipelineFailed(PipelineError):
    """A stage failed; the record has the details. A stage that failed on the store exits
    with the store's code (3, or 4 for a lost race), every other failure with 1."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code if exit_code in (StoreError.exit_code,
                                                    ConflictError.exit_code) else 1


class Interrupted(PipelineError):
    """Ctrl-C or SIGTERM: teardown ran, nothing was published."""

    exit_code = 130


class EndpointError(PipelineError):
    """`judge`: an endpoint to measure is unreachable, not ready, or stopped answering
    (exit 3: apart from the verdicts' 0, 1 and 2)."""

    exit_code = 3


class JudgeInputError(PipelineError):
    """`judge`: its spec or its arguments cannot work (exit 4: apart from the verdicts')."""

    exit_code = 4
