"""Whether the host swaps: the pointer as it was read, against what the host serves and the
releases it already refused. No I/O: the host loop reads the pointer and acts on the step.

A release that failed readiness or parity here is not started again while the pointer stays
on it (every interval would otherwise start it, fail it and say so again); a SIGHUP asks for
it once more. Each line worth saying is said once, not at every interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PointerRead:
    """The pointer as read: its current release (None: no live release), or why it could
    not be read."""

    release_id: str | None
    error: str | None = None


@dataclass(frozen=True)
class Keep:
    """Go on serving what is served; `say` is a line to print (None: nothing new)."""

    say: str | None = None


@dataclass(frozen=True)
class Swap:
    """Start `release_id` beside the served one, check it, and switch to it if it passes."""

    release_id: str


Step = Keep | Swap


@dataclass
class PointerWatch:
    environment: str
    serving: str
    refused: dict[str, str] = field(default_factory=dict)   # release id -> why
    _said: str | None = None

    def step(self, read: PointerRead, asked: bool = False) -> Step:
        """What to do about `read`; `asked`: an operator asked for a re-read (SIGHUP),
        which retries a refused release."""
        if read.error is not None:
            return self._once(f"cannot read the pointer of environment {self.environment}: "
                              f"{read.error}; still serving {self.serving}")
        target = read.release_id
        if target is None:
            return self._once(f"environment {self.environment} has no live release now; "
                              f"still serving {self.serving}")
        if target == self.serving:
            self._said = None
            return Keep()
        if target in self.refused and not asked:
            return Keep()
        return Swap(target)

    def swapped(self, release_id: str) -> None:
        self.serving = release_id
        self.refused.pop(release_id, None)
        self._said = None

    def refuse(self, release_id: str, reason: str) -> str:
        """Remember that `release_id` failed here; the one line that says so."""
        self.refused[release_id] = reason
        line = f"release {release_id} not served: {reason}; still serving {self.serving}"
        self._said = line
        return line

    def _once(self, line: str) -> Keep:
        if line == self._said:
            return Keep()
        self._said = line
        return Keep(line)
