"""The release attestation: an in-toto Statement v1 in a DSSE envelope.

Subjects are what a release consists of, each by its sha256: every blob of the manifest
(model, model repository or .mar, rendered config, spec, verification record), the serving
image by its registry digest when one was pushed, the merged spec's digest, and each file of
the serving layout when one was published beside the release. The
predicate is the evidence: the gate results and the facts of the run that produced them.
The envelope is stored as a blob (role `attestation`) before the manifest, which names it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.digest import canonical_json, sha256_bytes
from pipeline.release.manifest import BlobSource
from pipeline.release.manifest_record import ATTESTATION_ROLE, Manifest
from pipeline.release.serving_layout import layout_files, layout_subjects
from pipeline.release.signing.dsse import IN_TOTO_PAYLOAD_TYPE, Envelope, Signer, sign_envelope

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
RELEASE_PREDICATE = "https://serve-pipeline.dev/attestation/release/v1"
__all__ = ["ATTESTATION_ROLE"]


def release_subjects(name: str, blobs: Sequence[tuple[str, str]], spec_digest: str | None,
                     image_digest: str | None,
                     layout: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """(role, hex digest) of each blob, then the spec digest, the image digest and every
    file of the serving layout published beside the release (path: hex digest)."""
    subjects: list[dict[str, Any]] = [{"name": f"{name}/{role}", "digest": {"sha256": digest}}
                for role, digest in blobs]
    if spec_digest:
        subjects.append({"name": f"{name}/spec-digest",
                         "digest": {"sha256": spec_digest.removeprefix("sha256:")}})
    if image_digest:
        subjects.append({"name": f"{name}/image",
                         "digest": {"sha256": image_digest.removeprefix("sha256:")}})
    subjects += layout_subjects(name, layout or {})
    return subjects


def release_predicate(draft: Manifest, name: str) -> dict[str, Any]:
    """Gate results and run facts, from the manifest publish is about to write."""
    creator, server = draft.created_by_actor, draft.server
    predicate = {"name": name, "run_id": draft.run_id, "verified_in": draft.verified_in,
                 "spec_digest": draft.spec_digest, "created_by": draft.created_by,
                 "creator": None if creator is None else dict(creator),
                 "server": None if server is None else dict(server),
                 "gates": [dict(gate) for gate in draft.gates],
                 "stages": draft.stage_statuses(),
                 # Every measured figure a target environment's gates may read back.
                 "stages_sha256": stages_digest(draft)}
    if draft.release_id:
        predicate["release_id"] = draft.release_id
    return predicate


def stages_digest(manifest: Manifest) -> str:
    """The digest of the manifest's stage results (statuses and metrics), as attested."""
    return sha256_bytes(canonical_json(dict(manifest.stages)))


def statement(subjects: list[dict[str, Any]], predicate: dict[str, Any],
              predicate_type: str = RELEASE_PREDICATE) -> bytes:
    return canonical_json({"_type": STATEMENT_TYPE, "subject": subjects,
                           "predicateType": predicate_type, "predicate": predicate})


def attest(subjects: list[dict[str, Any]], predicate: dict[str, Any],
           signer: Signer | None) -> tuple[bytes, dict[str, Any]]:
    """The envelope's bytes and what the manifest says about it (`attestation`)."""
    envelope = sign_envelope(IN_TOTO_PAYLOAD_TYPE, statement(subjects, predicate),
                             [signer] if signer is not None else [])
    data = envelope.to_bytes()
    summary: dict[str, Any] = {"digest": sha256_bytes(data), "format": "dsse+in-toto",
                               "predicate_type": RELEASE_PREDICATE,
                               "signed": signer is not None}
    if signer is not None:
        summary["keyid"] = signer.keyid
    else:
        summary["unsigned_reason"] = ("no signing key configured (SERVE_PIPELINE_SIGNING_KEY, "
                                      "SERVE_PIPELINE_SIGNING_KEY_PEM or SERVE_PIPELINE_SIGNER)")
    return data, summary


def parse_statement(envelope: Envelope, predicate_type: str) -> dict[str, Any]:
    """The statement inside `envelope`; ValueError naming what is wrong."""
    if envelope.payload_type != IN_TOTO_PAYLOAD_TYPE:
        raise ValueError(f"payloadType is {envelope.payload_type!r}, not "
                         f"{IN_TOTO_PAYLOAD_TYPE}")
    try:
        body = json.loads(envelope.payload)
    except ValueError:
        raise ValueError("its payload is not JSON") from None
    if not isinstance(body, dict) or body.get("_type") != STATEMENT_TYPE:
        raise ValueError(f"its payload is not an in-toto Statement ({STATEMENT_TYPE})")
    if body.get("predicateType") != predicate_type:
        raise ValueError(f"predicateType is {body.get('predicateType')!r}, not "
                         f"{predicate_type}")
    if not isinstance(body.get("subject"), list) or not isinstance(body.get("predicate"),
                                                                    dict):
        raise ValueError("its statement has no subject list or predicate")
    return body


def subject_digests(body: Mapping[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    for subject in body.get("subject", []):
        digest = subject.get("digest") if isinstance(subject, Mapping) else None
        if isinstance(digest, Mapping) and isinstance(digest.get("sha256"), str):
            found[str(subject.get("name"))] = str(digest["sha256"])
    return found


def mismatches(manifest: Manifest, body: Mapping[str, Any]) -> list[str]:
    """Where the manifest and its attestation disagree (a manifest rewritten after it was
    attested): subjects, the digests the manifest names, and the recorded gates."""
    blobs = [(b.role, b.digest) for b in manifest.blobs if b.role != ATTESTATION_ROLE]
    expected = {s["name"]: s["digest"]["sha256"] for s in release_subjects(
        manifest.name, blobs, manifest.spec_digest, manifest.image_digest,
        layout_files(manifest))}
    attested = subject_digests(body)
    problems = [f"{subject}: manifest says {digest[:12]}, attestation "
                f"{attested[subject][:12] if subject in attested else 'has no such subject'}"
                for subject, digest in expected.items() if attested.get(subject) != digest]
    problems += [f"{subject}: attested but not in the manifest" for subject in attested
                 if subject not in expected]
    named = {"model": manifest.model_sha256, "artifact": manifest.artifact_sha256,
             "config": manifest.config_sha256}
    digests = set(attested.values())
    problems += [f"manifest {field}.sha256 {str(digest)[:12]} is not an attested subject"
                 for field, digest in named.items() if digest and digest not in digests]
    predicate = body["predicate"]
    if canonical_json(manifest.to_json().get("gates", [])) != canonical_json(
            predicate.get("gates", [])):
        problems.append("the manifest's gates differ from the attested gate results")
    # Attestations older than these facts lack them; a present one must match.
    for fact, value in (("name", manifest.name), ("release_id", manifest.release_id)):
        attested_value = predicate.get(fact)
        if attested_value is not None and attested_value != value:
            problems.append(f"the manifest's {fact} {value!r} is not the attested "
                            f"{attested_value!r}")
    stages = predicate.get("stages_sha256")
    if stages is not None and stages != stages_digest(manifest):
        problems.append("the manifest's stage results (metrics) differ from the attested ones")
    return problems


def attestation_blob(name: str, files: Sequence[BlobSource], draft: Manifest,
                     signer: Signer | None) -> tuple[BlobSource, Manifest]:
    """The attestation over `files` and `draft` (the manifest to be), as one more blob to
    publish, and the draft with its summary (`attestation`)."""
    subjects = release_subjects(name, [(f.role, f.digest) for f in files], draft.spec_digest,
                                draft.image_digest, layout_files(draft))
    data, summary = attest(subjects, release_predicate(draft, name), signer)
    return BlobSource(ATTESTATION_ROLE, None, data, summary["digest"]), draft.attested(summary)
