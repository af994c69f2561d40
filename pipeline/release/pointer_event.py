"""One move of an environment pointer, as its history (`environments/<name>/<env>.json`
`events`) and its audit entry hold it, and as `history <env> --format json` prints it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from pipeline.errors import StoreError
from pipeline.release.stored_json import in_shape, shape_of, text, unknown


class PointerAction(StrEnum):
    PROMOTE = "promote"
    ROLLBACK = "rollback"


@dataclass(frozen=True, kw_only=True)
class PointerEvent:
    """Field order is the order of the event's keys. `approved_by` (the approvals the move
    relied on) and `actor` (who ran the command, pipeline.release.identity) are None when
    the move recorded none; `manifest_sha256` is None in events older than it."""

    action: PointerAction
    release_id: str
    previous_release_id: str | None
    at: str
    by: str
    manifest_sha256: str | None = None
    note: str | None = None
    run_id: str | None = None
    approved_by: tuple[str, ...] | None = None
    actor: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    shape: tuple[str, ...] | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        every: dict[str, Any] = {
            "action": self.action.value, "release_id": self.release_id,
            "previous_release_id": self.previous_release_id, "at": self.at, "by": self.by,
            "manifest_sha256": self.manifest_sha256, "note": self.note, "run_id": self.run_id,
            "approved_by": None if self.approved_by is None else list(self.approved_by),
            "actor": None if self.actor is None else dict(self.actor), **self.extra}
        written = {key: value for key, value in every.items()
                   if key in _ALWAYS or value is not None}
        return in_shape(written, every, self.shape)

    @classmethod
    def from_json(cls, body: Any) -> PointerEvent:
        """Any event a version of the tool wrote; a StoreError for one it cannot have."""
        if not isinstance(body, Mapping) or not _ALWAYS - {"previous_release_id"} <= set(body):
            raise StoreError("an environment pointer event is malformed (it needs action, "
                             "release_id, at and by)")
        try:
            action = PointerAction(body["action"])
        except ValueError:
            raise StoreError(f"an environment pointer event has the action "
                             f"{body['action']!r}, neither promote nor rollback") from None
        approved = body.get("approved_by")
        actor = body.get("actor")
        return cls(action=action, release_id=str(body["release_id"]),
                   previous_release_id=text(body.get("previous_release_id")),
                   at=str(body["at"]), by=str(body["by"]),
                   manifest_sha256=text(body.get("manifest_sha256")),
                   note=text(body.get("note")), run_id=text(body.get("run_id")),
                   approved_by=tuple(str(item) for item in approved)
                   if isinstance(approved, list) else None,
                   actor=dict(actor) if isinstance(actor, Mapping) else None,
                   extra=unknown(body, _KNOWN), shape=shape_of(body))

    def withdraws(self, release_id: str) -> bool:
        """Whether this is a rollback that moved the environment away from `release_id`."""
        return self.action is PointerAction.ROLLBACK and self.previous_release_id == release_id


_ALWAYS = frozenset({"action", "release_id", "previous_release_id", "at", "by"})
_KNOWN = frozenset(item.name for item in fields(PointerEvent)) - {"extra", "shape"}
