"""Attacks on the promotion policy, and their tally.

An `Attack` runs one way around the policy (`run(world)`, usually the finished CLI
process) and `expect(result, world)` judges what came of it: None when the system did
the right thing (refused for the right reason; for a fault after the pointer moved,
reported the move as done and kept it repairable), else what went wrong. `tally` runs
them against one world (a project on a store) and counts. The suite prints

    custody: attacks=N refused=N wrong_reason=0
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Judge = Callable[[Any, Any], "str | None"]


@dataclass(frozen=True)
class Attack:
    name: str
    run: Callable[[Any], Any]
    expect: Judge


@dataclass(frozen=True)
class Outcome:
    attack: str
    refused: bool
    detail: str


def refusal(exit_code: int, reason: str) -> Judge:
    """A refusal: this exit code and a single stderr line, the error, holding `reason`."""
    def judge(result: subprocess.CompletedProcess[str], world: Any) -> str | None:
        lines = result.stderr.strip().splitlines()
        if result.returncode == exit_code and len(lines) == 1 and \
                lines[0].startswith("error: ") and reason in lines[0]:
            return None
        return f"exit {result.returncode}: {result.stderr.strip()[-600:] or result.stdout[-600:]}"
    return judge


def tally(attacks: list[Attack], world: Any,
          outcomes: list[Outcome] | None = None) -> tuple[int, int, int]:
    """(attacks, refused, wrong_reason) of running every attack on `world`; each one's
    outcome is appended to `outcomes` when given."""
    seen = [Outcome(a.name, (wrong := a.expect(a.run(world), world)) is None, wrong or "")
            for a in attacks]
    if outcomes is not None:
        outcomes.extend(seen)
    refused = sum(outcome.refused for outcome in seen)
    return len(attacks), refused, len(attacks) - refused
