"""A release's manifest (`releases/<name>/<release_id>.json`) as one typed value.

Publish writes it once, create-only, and everything that trusts a release reads it: the
promotion policy, rollback, `verify`, the dossier and the reports. Its bytes are what
pointer events, approvals and the attestation are bound to, so `to_json` writes exactly
the keys, in the order, publish always has; `from_json` reads any manifest a version of the
tool wrote (one from before the attestation, a test's with only a run id) and keeps its
shape. The nested facts (server, model, artifact, config, image, git, gates, stages) are
kept as stored, read through the properties below.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from pipeline.errors import StoreError
from pipeline.release.stored_json import in_shape, objects, shape_of, text, unknown

MANIFEST_SCHEMA = 1
VERIFICATION_ROLE = "verification"
ATTESTATION_ROLE = "attestation"


@dataclass(frozen=True)
class BlobRef:
    role: str
    digest: str
    size: int
    stored: dict[str, str] | None = None   # the store's own checksum, ETag, version

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"role": self.role, "digest": self.digest, "size": self.size}
        if self.stored is not None:
            body["stored"] = self.stored
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any], what: str) -> BlobRef:
        try:
            role, digest, size = str(body["role"]), str(body["digest"]), int(body["size"])
        except (KeyError, TypeError, ValueError):
            raise StoreError(f"{what}: a blob entry needs a role, a digest and a size") from None
        stored = body.get("stored")
        return cls(role, digest, size, dict(stored) if isinstance(stored, Mapping) else None)

    @property
    def recorded_checksum(self) -> str | None:
        """The store's own sha256 checksum recorded at publish (S3), if any."""
        checksum = (self.stored or {}).get("checksum_sha256")
        return str(checksum) if checksum else None


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """Field order is the order of the manifest's keys. A draft (what publish is about to
    write, pipeline.release.manifest.publish_release) has no name, release id, creation
    time or blobs yet. `extra` keeps what this version does not read, `shape` the keys of
    the JSON it was read from (pipeline.release.stored_json)."""

    schema: int = MANIFEST_SCHEMA
    name: str = ""
    release_id: str = ""
    created_at: str | None = None
    run_id: str | None = None
    created_by: str | None = None
    verified_in: str | None = None
    spec_digest: str | None = None
    server: Mapping[str, Any] | None = None
    model: Mapping[str, Any] | None = None
    artifact: Mapping[str, Any] | None = None
    config: Mapping[str, Any] | None = None
    image: Mapping[str, Any] | None = None
    git: Mapping[str, Any] | None = None
    gates: tuple[Mapping[str, Any], ...] = ()
    stages: Mapping[str, Any] = field(default_factory=dict)
    created_by_actor: Mapping[str, Any] | None = None
    serving_layout: Mapping[str, Any] | None = None   # pipeline.release.serving_layout
    attestation: Mapping[str, Any] | None = None
    blobs: tuple[BlobRef, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    shape: tuple[str, ...] | None = field(default=None, compare=False)

    # -- reading -------------------------------------------------------------------------

    def blob(self, role: str) -> BlobRef | None:
        return next((blob for blob in self.blobs if blob.role == role), None)

    @property
    def server_kind(self) -> str | None:
        return text((self.server or {}).get("kind"))

    @property
    def model_sha256(self) -> str | None:
        return text((self.model or {}).get("sha256"))

    @property
    def artifact_sha256(self) -> str | None:
        return text((self.artifact or {}).get("sha256"))

    @property
    def model_source(self) -> str:
        """Where the model came from, as publish described it (`path`, `dvc:...@rev`)."""
        return str((self.model or {}).get("source", ""))

    @property
    def config_sha256(self) -> str | None:
        return text((self.config or {}).get("sha256"))

    @property
    def config_file(self) -> str | None:
        return text((self.config or {}).get("file"))

    @property
    def image_digest(self) -> str | None:
        digest = (self.image or {}).get("digest")
        return digest if isinstance(digest, str) else None

    @property
    def attestation_digest(self) -> str | None:
        digest = (self.attestation or {}).get("digest")
        return digest if isinstance(digest, str) else None

    @property
    def creator(self) -> Mapping[str, Any]:
        """Who published it (pipeline.release.identity), as recorded; empty when unknown."""
        return self.created_by_actor or {}

    def stage_metrics(self, stage: str) -> Mapping[str, Any]:
        facts = self.stages.get(stage)
        metrics = facts.get("metrics") if isinstance(facts, Mapping) else None
        return metrics if isinstance(metrics, Mapping) else {}

    def stage_statuses(self) -> dict[str, Any]:
        return {stage: facts.get("status") for stage, facts in self.stages.items()
                if isinstance(facts, Mapping)}

    # -- JSON ----------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        every: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name not in _STORAGE and not (item.name in _ONLY_WHEN_SET and value is None):
                every[item.name] = _json(value)
        every.update(self.extra)
        return in_shape(every, every, self.shape)

    @classmethod
    def from_json(cls, body: Mapping[str, Any], what: str = "manifest") -> Manifest:
        """Any manifest a version of the tool wrote. A fact of a shape it cannot read (gates
        that are not a list of objects, a model that is not an object) reads as missing and
        is kept, as stored, in `extra`; blobs it cannot read are a StoreError, since nothing
        about the release can be checked without them."""
        schema = body.get("schema")
        extra = unknown(body, _KNOWN)
        facts: dict[str, Any] = {}
        for key in (*_OBJECTS, "stages"):
            value = body.get(key)
            if isinstance(value, Mapping):
                facts[key] = dict(value)
            elif value is not None or (key == "stages" and key in body):
                extra[key] = value
        gates = body.get("gates")
        if isinstance(gates, list) and all(isinstance(gate, Mapping) for gate in gates):
            facts["gates"] = tuple(dict(gate) for gate in gates)
        elif "gates" in body:
            extra["gates"] = gates
        return cls(
            schema=schema if isinstance(schema, int) else MANIFEST_SCHEMA,
            name=str(body.get("name") or ""), release_id=str(body.get("release_id") or ""),
            created_at=text(body.get("created_at")), run_id=text(body.get("run_id")),
            created_by=text(body.get("created_by")), verified_in=text(body.get("verified_in")),
            spec_digest=text(body.get("spec_digest")), **facts,
            blobs=tuple(BlobRef.from_json(blob, what) for blob in objects(body, "blobs", what)),
            extra=extra, shape=shape_of(body))

    def attested(self, summary: Mapping[str, Any]) -> Manifest:
        """This draft with what its attestation is (pipeline.release.signing.attestation)."""
        shape = self.shape if self.shape is None or "attestation" in self.shape \
            else (*self.shape, "attestation")
        return replace(self, attestation=summary, shape=shape)

    def published(self, name: str, release_id: str, created_at: str,
                  blobs: tuple[BlobRef, ...]) -> Manifest:
        """This draft as the release publish writes: named, dated and with its blobs."""
        shape = None if self.shape is None else (
            "schema", "name", "release_id", "created_at",
            *(key for key in self.shape if key not in _PUBLISHED), "blobs")
        return replace(self, name=name, release_id=release_id, created_at=created_at,
                       blobs=blobs, shape=shape)


def _json(value: Any) -> Any:
    if isinstance(value, BlobRef):
        return value.to_json()
    if isinstance(value, tuple):
        return [_json(item) for item in value]
    if isinstance(value, Mapping):
        return dict(value)
    return value


_STORAGE = frozenset({"extra", "shape"})
# Keys a manifest has only when publish set them: a release without one reads and writes as
# the earlier versions' manifests did.
_ONLY_WHEN_SET = frozenset({"serving_layout"})
_OBJECTS = ("server", "model", "artifact", "config", "image", "git", "created_by_actor",
            "serving_layout", "attestation")
_PUBLISHED = frozenset({"schema", "name", "release_id", "created_at", "blobs"})
_KNOWN = frozenset(item.name for item in fields(Manifest)) - _STORAGE
