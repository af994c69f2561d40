"""The stage contract: what the runner needs of a stage, seen by the type checker.

A stage is a module of `stages/` (as cibuildwheel's platforms are modules of its
`platforms/`): a name, whether it talks to the server, and `run`. Modules rather than
objects because a stage has no state of its own between runs (what it makes goes into
the `RunContext`), and a module per stage keeps `stages/<name>.py` the one place to read
it. `pipeline.runner.STAGES` lists them typed as `Stage`, so mypy checks each module
against this Protocol; tests pass small objects that satisfy it.
"""

from __future__ import annotations

from typing import Protocol

from pipeline.context import RunContext
from pipeline.stage_result import StageResult


class Stage(Protocol):
    """Upper-case members: in a stage module they are its constants."""

    @property
    def NAME(self) -> str:
        """The stage's name in the record, the report and `--stages`."""

    @property
    def USES_SERVER(self) -> bool:
        """Whether it talks to the running server (the last such stage lets teardown
        begin while the rest run)."""

    def run(self, ctx: RunContext) -> StageResult:
        """Do the stage's work; a PipelineError it raises fails it with that exit code."""
