"""publish: model, config and verification results as one content-addressed release."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace
from typing import Any

from pipeline.context import RunContext
from pipeline.digest import canonical_json, sha256_bytes
from pipeline.errors import StoreError
from pipeline.outcomes.publish import UploadOutcome
from pipeline.provenance import git_state
from pipeline.record import RunRecord, ServerInfo
from pipeline.release.identity import acting_identity
from pipeline.release.manifest import (
    BlobSource,
    Manifest,
    new_release_id,
    publish_release,
    utc_now,
)
from pipeline.release.pointer_event import PointerAction
from pipeline.release.policy import Decision, commit, missing_layout
from pipeline.release.regression import (
    fallbacks_used,
    live_release,
    live_release_gate,
    regression_gates,
)
from pipeline.release.serving_layout import PublishedLayout, layout_prefix
from pipeline.release.signing.attestation import attestation_blob
from pipeline.release.signing.keys import release_signer
from pipeline.release.store import store_for
from pipeline.release.store.base import Store
from pipeline.servers import server_kind
from pipeline.servers.deployment import ReleaseFiles
from pipeline.stage_result import Gate, StageResult, Status

NAME = "publish"
USES_SERVER = False
RECORDED_BASIS = "against a recorded run of another day"


def manifest_draft(ctx: RunContext, image: dict[str, Any] | None,
                   creator: dict[str, Any]) -> Manifest:
    """The manifest to be: everything but its name, id, date, blobs and attestation."""
    spec = ctx.loaded.spec
    build = ctx.require_build()
    return Manifest(
        run_id=ctx.run_id, created_by=ctx.actor, verified_in=ctx.loaded.environment,
        spec_digest=ctx.loaded.digest,
        server={"kind": spec.server.kind, "runtime": spec.server.runtime,
                "backend": spec.server.backend, "device": spec.server.device},
        model={"source": spec.model.source.describe(), "format": spec.model.format,
               "sha256": build.model_digest,
               "provenance": ctx.model_source.provenance if ctx.model_source else None},
        artifact={"kind": build.kind, "sha256": build.digest},
        config={"file": build.config_name, "sha256": build.config_digest},
        image=image, git=git_state(ctx.loaded.workspace),
        gates=tuple({"stage": r.name, **gate.__dict__} for r in ctx.results
                    for gate in r.gates),
        stages={r.name: {"status": r.status.value, "metrics": r.metrics} for r in ctx.results},
        created_by_actor=creator)


def _push_image(ctx: RunContext) -> dict[str, Any] | None:
    """Push the serving image (before the manifest): the release names it by digest."""
    if ctx.image is None:
        return None
    image_spec = ctx.loaded.spec.server.image
    if image_spec is None or image_spec.repository is None or ctx.docker is None:
        return {"id": ctx.image.id, "reference": None, "labels": ctx.image.labels,
                "pushed": False}
    tag = ctx.run_id
    ctx.progress(NAME, 0, 1, f"pushing {image_spec.repository}:{tag}")
    digest = ctx.docker.push(ctx.image, image_spec.repository, tag)
    return {"id": ctx.image.id, "repository": image_spec.repository, "tag": tag,
            "digest": digest, "reference": f"{image_spec.repository}@{digest}",
            "labels": ctx.image.labels, "pushed": True}


def _promote_verified(ctx: RunContext) -> StageResult:
    """Re-verification of an existing release passed: move the pointer, publish nothing."""
    assert ctx.promotion is not None and ctx.promote_to is not None
    store = store_for(ctx.loaded)
    source = ", ".join(ctx.loaded.policy.requires) or "a run"
    moved = commit(store, ctx.loaded.spec.name, ctx.promotion, ctx.actor, f"from {source}",
                   run_id=ctx.run_id, actor=acting_identity(ctx.env, store))
    ctx.release_id = ctx.promotion.release_id
    previous = moved.event.previous_release_id or "nothing"
    message = (f"re-verified release {ctx.release_id}; {ctx.promote_to} now points at it "
               f"(was {previous})")
    message += "".join(f"; {note}" for note in missing_layout(store, ctx.loaded,
                                                             ctx.promotion.manifest))
    return StageResult(NAME, Status.PASSED, message + "".join(f"; {w}" for w in moved.warnings),
                       details={"store": store.url, "event": moved.event.to_json(),
                                "release_id": ctx.release_id,
                                "warnings": list(moved.warnings)})


def _against_live(ctx: RunContext, store: Store) -> tuple[list[Gate], dict[str, Any]]:
    """Deltas against the release live in the target environment; gates if the spec asks.

    A live release that exists but cannot be read fails the gate (fail closed); without
    the gate the details say that the comparison could not be made."""
    environment = ctx.promote_to or ctx.loaded.environment
    if environment is None:
        return [], {}
    settings = ctx.loaded.spec.stages.regression
    # Side by side, the regression stage decided; this comparison is information only.
    decides = settings.gate and settings.against == "recorded"
    live = live_release(store, ctx.loaded.spec.name, environment)
    if live.problem is not None:
        details = {"comparison": {"environment": environment,
                                  "baseline_release_id": live.release_id,
                                  "unavailable": live.problem}}
        return ([live_release_gate(live)] if decides else []), details
    if live.verification is None:
        details = {"comparison": {"environment": environment, "baseline_release_id": None}}
        return ([live_release_gate(live)] if decides else []), details
    record = RunRecord(stages=list(ctx.results), server=ServerInfo(ctx.loaded.spec.server.kind))
    gates, deltas = regression_gates(record, live.verification, settings)
    regressed = [f"{d.stage}.{d.metric} {d.change_text}" for d in deltas if d.regressed]
    comparison: dict[str, Any] = {"environment": environment,
                                  "basis": RECORDED_BASIS, "decides": decides,
                                  "baseline_release_id": live.release_id,
                                  "tolerance": settings.tolerance.fraction,
                                  "regressions": regressed}
    fallbacks = fallbacks_used(live.verification, settings)
    if fallbacks:
        comparison["fallbacks"] = fallbacks
    gates = [live_release_gate(live), *gates]
    return (gates if decides else []), {"comparison": comparison}


def run(ctx: RunContext) -> StageResult:
    if ctx.promotion is not None:
        return _promote_verified(ctx)
    spec = ctx.loaded.spec
    build = ctx.require_build()
    store = store_for(ctx.loaded)
    gates, comparison = _against_live(ctx, store)
    if any(not gate.passed for gate in gates):
        result = StageResult.judged(NAME, gates, "", details=comparison)
        result.message = ("regression against the live release: " + result.message +
                          "; nothing was published")
        if "unavailable" in comparison.get("comparison", {}):
            result.exit_code = StoreError.exit_code    # the store could not give it: 3
        return result
    spec_bytes = ctx.loaded.canonical_json().encode()
    verification = canonical_json({"run_id": ctx.run_id,
                                   "stages": [r.to_json() for r in ctx.results]})
    config_bytes = build.config_text.encode()
    files = [
        BlobSource(build.kind, build.archive, None, build.digest),
        BlobSource("model", build.model_file, None, build.model_digest),
        BlobSource(build.config_name, None, config_bytes, build.config_digest),
        BlobSource("spec", None, spec_bytes, sha256_bytes(spec_bytes)),
        BlobSource("verification", None, verification, sha256_bytes(verification)),
    ]
    identity = acting_identity(ctx.env, store)
    moment = utc_now()
    # The id is chosen before the attestation, which binds it: a manifest copied under
    # another id does not verify.
    draft = replace(manifest_draft(ctx, _push_image(ctx), identity),
                    release_id=new_release_id(moment, spec.name + ctx.run_id))
    with ExitStack() as scratch:
        layout = None
        if spec.publish.serving_layout:
            layout = scratch.enter_context(PublishedLayout(
                server_kind(spec.server.kind),
                ReleaseFiles(spec.name, build.archive, config_bytes, build.config_name)))
            draft = replace(draft, serving_layout=layout.manifest_entry())
        attestation, draft = attestation_blob(spec.name, files, draft,
                                              release_signer(ctx.env))
        files.append(attestation)

        def uploaded(done: int, total: int) -> None:
            ctx.progress(NAME, done, total, f"{done / 2**20:.1f} of {total / 2**20:.1f} MiB "
                         f"in {len(files)} blobs to {store.url}")

        def lay_out(release_id: str, manifest: Manifest) -> Manifest:
            if layout is None:
                return manifest
            ctx.progress(NAME, 0, 1, f"serving layout: {len(layout.digests)} files")
            return layout.write(store, spec.name, release_id, manifest)

        uploaded(0, 1)
        outcome = publish_release(store, spec.name, files, draft, moment,
                                  progress=uploaded, before_manifest=lay_out)
    ctx.release_id = outcome.release_id
    details: dict[str, Any] = {"store": store.url, "release_id": outcome.release_id,
                               **comparison}
    signed = (outcome.manifest.attestation or {}).get("signed")
    message = (f"release {outcome.release_id}: {outcome.uploaded_blobs} blobs uploaded "
               f"({outcome.uploaded_bytes / 1024:.0f} KiB), {outcome.skipped_blobs} already "
               f"present; attestation {'signed' if signed else 'UNSIGNED (no signing key)'}")
    if layout is not None:
        where = f"{store.url.rstrip('/')}/{layout_prefix(spec.name, outcome.release_id)}"
        details["serving_layout"] = where
        message += f"; serving layout ({len(layout.digests)} files, attested) at {where}"
    if ctx.promote_to is not None:
        # The approval is part of the move: recorded only if the pointer moves.
        decision = Decision(PointerAction.PROMOTE, ctx.promote_to, outcome.release_id,
                            outcome.manifest, [ctx.approved_by] if ctx.approved_by else [],
                            (f"{ctx.promote_to}'s gates measured by this run",))
        moved = commit(store, spec.name, decision, ctx.actor, run_id=ctx.run_id,
                       actor=identity)
        details["event"] = moved.event.to_json()
        details["warnings"] = list(moved.warnings)
        previous = moved.event.previous_release_id or "nothing"
        message += f"; {ctx.promote_to} now points at it (was {previous})"
        message += "".join(f"; {warning}" for warning in moved.warnings)
    unavailable = comparison.get("comparison", {}).get("unavailable")
    if unavailable:
        message += f"; not compared with the live release ({unavailable})"
    regressions = comparison.get("comparison", {}).get("regressions")
    if regressions:
        message += (f"; worse than the live release ({RECORDED_BASIS}): "
                    f"{', '.join(regressions[:4])}")
    return StageResult(NAME, Status.PASSED, message, gates=gates,
                       metrics=UploadOutcome(uploaded_blobs=float(outcome.uploaded_blobs),
                                             uploaded_bytes=float(outcome.uploaded_bytes),
                                             skipped_blobs=float(outcome.skipped_blobs),
                                             ).to_json(),
                       details=details)
