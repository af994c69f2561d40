"""Approvals as typed records: the stored entry (`audit/<name>/<stamp>-approve-<env>-<tag>
.json`, canonical JSON) and the predicate its envelope signs.

Entries are read from a store anyone with write access may have edited, so `from_json`
never refuses one: a hand-written entry loads, and pipeline.release.signing.approvals
judges it (it does not count). Both write back the keys they were read with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.release.stored_json import in_shape, shape_of, text, unknown

APPROVE_ACTION = "approve"


@dataclass(frozen=True)
class EnvironmentHead:
    """An environment's history as an approver saw it: once it moves, the approval is spent."""

    events: int
    last_at: str | None
    current: str | None

    def to_json(self) -> dict[str, Any]:
        return {"events": self.events, "last_at": self.last_at, "current": self.current}


@dataclass(frozen=True, kw_only=True)
class ApprovalPredicate:
    """What an approver signs (the statement's subject, the manifest's sha256, is beside it).
    `environment_head` is as signed: judged by comparing it with the head now."""

    name: str | None
    release_id: str | None
    environment: str | None
    approved_at: str | None = None
    nonce: str | None = None
    environment_head: Mapping[str, Any] | None = None
    approver: Mapping[str, Any] | None = None
    note: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    shape: tuple[str, ...] | None = field(default=None, compare=False)

    @property
    def approver_identity(self) -> Mapping[str, Any]:
        """Who approved (pipeline.release.identity), as they recorded it; empty if unknown."""
        identity = (self.approver or {}).get("identity")
        return identity if isinstance(identity, Mapping) else {}

    def to_json(self) -> dict[str, Any]:
        every: dict[str, Any] = {
            "name": self.name, "release_id": self.release_id, "environment": self.environment,
            "approved_at": self.approved_at, "nonce": self.nonce,
            "environment_head": _plain(self.environment_head),
            "approver": _plain(self.approver), "note": self.note, **self.extra}
        return in_shape(every, every, self.shape)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> ApprovalPredicate:
        head, approver = body.get("environment_head"), body.get("approver")
        return cls(name=text(body.get("name")), release_id=text(body.get("release_id")),
                   environment=text(body.get("environment")),
                   approved_at=text(body.get("approved_at")), nonce=text(body.get("nonce")),
                   environment_head=dict(head) if isinstance(head, Mapping) else None,
                   approver=dict(approver) if isinstance(approver, Mapping) else None,
                   note=text(body.get("note")), extra=unknown(body, _PREDICATE_KEYS),
                   shape=shape_of(body))


@dataclass(frozen=True, kw_only=True)
class Approval:
    """A stored approval entry. `envelope` is the DSSE envelope as stored (None: unsigned);
    only its signature, checked against trusted keys, makes the approval count."""

    release_id: str | None
    environment: str | None
    name: str | None
    by: str | None
    at: str | None
    note: str | None = None
    actor: Mapping[str, Any] | None = None
    keyid: str | None = None
    envelope: Any = None
    action: str = APPROVE_ACTION
    extra: Mapping[str, Any] = field(default_factory=dict)
    shape: tuple[str, ...] | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        every: dict[str, Any] = {
            "action": self.action, "release_id": self.release_id,
            "environment": self.environment, "name": self.name, "by": self.by, "at": self.at,
            "note": self.note, "actor": _plain(self.actor), "keyid": self.keyid,
            "envelope": self.envelope, **self.extra}
        return in_shape(every, every, self.shape)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Approval:
        actor = body.get("actor")
        return cls(action=str(body.get("action", APPROVE_ACTION)),
                   release_id=text(body.get("release_id")),
                   environment=text(body.get("environment")), name=text(body.get("name")),
                   by=text(body.get("by")), at=text(body.get("at")), note=text(body.get("note")),
                   actor=dict(actor) if isinstance(actor, Mapping) else None,
                   keyid=text(body.get("keyid")), envelope=body.get("envelope"),
                   extra=unknown(body, _APPROVAL_KEYS), shape=shape_of(body))


def _plain(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if value is None else dict(value)


_PREDICATE_KEYS = frozenset({"name", "release_id", "environment", "approved_at", "nonce",
                             "environment_head", "approver", "note"})
_APPROVAL_KEYS = frozenset({"action", "release_id", "environment", "name", "by", "at", "note",
                            "actor", "keyid", "envelope"})
