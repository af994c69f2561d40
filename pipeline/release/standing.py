"""What an environment's pointer history says about one release there: live, withdrawn.

A release was *live* in an environment when some event (promote or rollback) pointed
the environment at it. It is *withdrawn* there when a rollback moved the pointer away
from it and no promotion brought it back since: a rollback says the release had a
problem there. A withdrawn release no longer counts as having passed that environment,
and rollback does not return to it; only a promotion, with every check, does.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.errors import UsageError
from pipeline.release.pointer_event import PointerAction, PointerEvent
from pipeline.release.pointers import Pointer


@dataclass(frozen=True)
class Standing:
    release_id: str
    environment: str
    promoted_at: str | None        # the last promotion into the environment
    live_at: str | None            # the last move (promote or rollback) onto it
    withdrawn: PointerEvent | None     # the rollback away from it, when not undone since

    @property
    def was_live(self) -> bool:
        return self.live_at is not None

    @property
    def passed(self) -> bool:
        """Promoted into the environment and not withdrawn from it since."""
        return self.promoted_at is not None and self.withdrawn is None

    def withdrawn_text(self) -> str:
        event = self.withdrawn
        return (f"{self.release_id} was withdrawn from {self.environment} by the rollback at "
                f"{event.at if event else None} (by {event.by if event else None})")


def standing(pointer: Pointer, release_id: str) -> Standing:
    promoted_at = live_at = None
    withdrawn: PointerEvent | None = None
    for event in pointer.events:
        if event.release_id == release_id:
            live_at = event.at
            if event.action is PointerAction.PROMOTE:
                promoted_at, withdrawn = live_at, None
        elif event.withdraws(release_id):
            withdrawn = event
    return Standing(release_id, pointer.environment, promoted_at, live_at, withdrawn)


def rollback_target(pointer: Pointer) -> str:
    """Where a plain `rollback` goes (like `rollout undo`, and again after that): the most
    recently live release before the current one that no rollback withdrew. A second
    rollback so steps further back, never onto the release the first one withdrew."""
    if pointer.current is None:
        raise UsageError(f"environment {pointer.environment} has no release to roll back from")
    for event in reversed(pointer.events):
        candidate = event.release_id
        if candidate != pointer.current and standing(pointer, candidate).withdrawn is None:
            return candidate
    raise UsageError(f"environment {pointer.environment} has no earlier release than "
                     f"{pointer.current} that was not withdrawn by a rollback (`rollback "
                     "--to` one that was, or promote it again)")
