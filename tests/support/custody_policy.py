"""The attacks on the promotion policy: every way around it with the tool's own commands
(tests/reliability/test_custody.py runs them, against the local store and S3).

The releases are published by the library function the publish stage calls, with the
gate results a run records (tests/support/recorded.py): the attacks are on what happens
to releases afterwards, and a measured 45 ms p99 cannot be ordered from a real server.
"""

from __future__ import annotations

import json
from typing import Any

from pipeline.digest import sha256_bytes
from pipeline.release.manifest import manifest_key
from pipeline.release.pointers import pointer_key
from pipeline.release.store.base import blob_key
from pipeline.release.store.s3 import S3Store
from tests.support.custody import (
    Attack,
    CliResult,
    CustodyWorld,
    Judged,
    contains,
    refusal,
)
from tests.support.faultproxy import FaultRule


def approved(world: CustodyWorld, release: str) -> str:
    result = world.approve(release)
    assert result.returncode == 0, result.stderr
    return release


def rollback_to_never_live(world: CustodyWorld) -> CliResult:
    live = approved(world, world.staged(b"live"))
    assert world.promote("production", live).returncode == 0
    never = world.publish(b"never staged")
    return world.cli("rollback", "production", "--to", never)


def slower_than_production(world: CustodyWorld) -> CliResult:
    slow = approved(world, world.staged(b"slow", p99_ms=45.0, p99_high_ms=47.0))
    return world.promote("production", slow)


def another_spec(world: CustodyWorld) -> CliResult:
    other = world.publish(b"other model", name="other-model")
    copied = world.store.read(manifest_key("other-model", other))
    assert copied is not None
    world.store.create(manifest_key("fraud-mlp", other), copied)
    return world.promote("staging", other)


def inconclusive_to_production(world: CustodyWorld) -> CliResult:
    unsure = approved(world, world.staged(b"unsure", p99_ms=30.0, p99_high_ms=52.0,
                                          p99_outcome="inconclusive"))
    return world.promote("production", unsure)


def withdrawn_from_staging(world: CustodyWorld) -> CliResult:
    world.staged(b"good")
    bad = approved(world, world.staged(b"bad"))
    assert world.cli("rollback", "staging").returncode == 0
    return world.promote("production", bad)


CORRUPTED = b"model that was once uploaded badly" * 100


def corrupt_blob_at_publish(world: CustodyWorld) -> CliResult:
    corrupt = b"not the model"
    if world.proxy is None:
        path = world.project / ".serve-pipeline" / "store" / blob_key(sha256_bytes(CORRUPTED))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(corrupt)
    else:   # what a writer with bucket access can do: other bytes, our digest's metadata
        s3 = world.store
        assert isinstance(s3, S3Store)
        s3.client.put_object(Bucket=s3.bucket, Key=s3._key(blob_key(sha256_bytes(CORRUPTED))),
                             Body=corrupt, Metadata={"sha256": sha256_bytes(CORRUPTED)})
    release = world.publish(CORRUPTED)
    return world.promote("staging", release)


def blob_replaced(result: CliResult, world: CustodyWorld) -> Judged:
    """Refused: the corrupt blob does not stay; for its reason: publish replaced it, so
    the promotion after it succeeds."""
    problem = world.store.verify_blob(sha256_bytes(CORRUPTED))
    if problem is not None:
        return Judged(False, f"the corrupt blob is still there: {problem}")
    return Judged(True, None if result.returncode == 0 else
                  f"the promotion after publish failed: {result.stderr.strip()}")


def audit_write_fails(world: CustodyWorld) -> CliResult:
    release = approved(world, world.staged(b"audited"))
    assert world.proxy is not None
    # The entry after the swap, not the intent before it (which would refuse the move).
    with world.proxy.faults(FaultRule(("slowdown",), probability=1.0, methods=["PUT"],
                                      path=r"/audit/.*-promote-production-")):
        return world.promote("production", release)


def reported_done_and_repaired(result: CliResult, world: CustodyWorld) -> Judged:
    """Refused: the move is not reported as a failure; for its reason: a warning names
    `store verify --repair`, which finds and repairs the missing audit entry."""
    if result.returncode != 0:
        return Judged(False, f"exit {result.returncode} after the swap: {result.stderr}")
    if "warning: production points at" not in result.stderr or \
            "store verify --repair" not in result.stderr:
        return Judged(True, f"no warning about the audit entry: {result.stderr.strip()!r}")
    if world.current("production") is None:
        return Judged(True, "the pointer did not move")
    before = world.cli("store", "verify")
    repaired = world.cli("store", "verify", "--repair")
    after = world.cli("store", "verify")
    if "has no audit entry" not in before.stdout or repaired.returncode != 0 or \
            after.returncode != 0:
        return Judged(True, f"store verify did not find and repair it: {before.stdout} "
                            f"{after.stdout}")
    return Judged(True)


def _pointer(world: CustodyWorld, environment: str) -> dict[str, Any]:
    data = world.store.read(pointer_key("fraud-mlp", environment))
    assert data is not None
    body: dict[str, Any] = json.loads(data)
    return body


def _rewrite(world: CustodyWorld, environment: str, body: dict[str, Any]) -> None:
    """What a writer with access to `environments/` alone can do: the audit log untouched."""
    world.overwrite(pointer_key("fraud-mlp", environment), json.dumps(body).encode())


def rollback_undone_by_hand(world: CustodyWorld) -> CliResult:
    world.staged(b"good")
    bad = approved(world, world.staged(b"bad"))
    assert world.cli("rollback", "staging").returncode == 0
    staging = _pointer(world, "staging")
    staging["events"].pop()                     # the rollback that withdrew it
    staging["current"] = bad
    _rewrite(world, "staging", staging)
    return world.promote("production", bad)


def promote_event_added_by_hand(world: CustodyWorld) -> CliResult:
    world.staged(b"live")
    never = approved(world, world.publish(b"never staged"))
    staging = _pointer(world, "staging")
    forged = dict(staging["events"][-1], release_id=never,
                  previous_release_id=staging["current"],
                  manifest_sha256=sha256_bytes(world.store.read(manifest_key("fraud-mlp",
                                                                             never)) or b""),
                  at="2026-01-01T00:00:00.000000Z")
    staging["events"].append(forged)
    staging["current"] = never
    _rewrite(world, "staging", staging)
    return world.promote("production", never)


def current_edited_then_deployed(world: CustodyWorld) -> CliResult:
    live = approved(world, world.staged(b"approved"))
    assert world.promote("production", live).returncode == 0
    other = world.staged(b"not approved")
    production = _pointer(world, "production")
    production["current"] = other
    _rewrite(world, "production", production)
    return world.cli("materialize", "production", "--to",
                     str(world.project / "deployed"))


def audit_entry_rewritten(world: CustodyWorld) -> CliResult:
    live = approved(world, world.staged(b"audited move"))
    assert world.promote("production", live).returncode == 0
    [key] = [k for k in world.store.list("audit/fraud-mlp/")
             if "-promote-production-" in k]
    entry = json.loads(world.store.read(key) or b"{}")
    world.overwrite(key, json.dumps({**entry, "by": "someone-else"}).encode())
    return world.cli("store", "verify")


POLICY_ATTACKS = [
    Attack("rollback --to a release never live there", rollback_to_never_live,
           refusal(5, "was never live in production; promote it instead (requires: passed "
                      "staging, an approval, production's gates)")),
    Attack("p99 45 ms to a 40 ms production", slower_than_production,
           refusal(5, "latency.p99 was measured at bound 47ms (against 50.0ms); production "
                      "requires <= 40ms (environments/production.yaml: slo.p99)")),
    Attack("promote staging --release of another spec", another_spec,
           refusal(5, "was published from the spec 'other-model', not 'fraud-mlp'")),
    Attack("inconclusive p99 to production", inconclusive_to_production,
           refusal(5, "latency.p99 was measured inconclusive; production does not accept")),
    Attack("withdrawn from staging to production", withdrawn_from_staging,
           refusal(5, "does not count as passed staging")),
    Attack("a corrupt blob already in the store at publish", corrupt_blob_at_publish,
           blob_replaced),
    Attack("a staging rollback undone in the pointer alone", rollback_undone_by_hand,
           refusal(3, "the audit log records 1 moves of staging that its pointer does not "
                      "hold")),
    Attack("a promote event added to staging by hand", promote_event_added_by_hand,
           refusal(3, "has no audit entry, so it does not count")),
    Attack("production's current edited, then materialized", current_edited_then_deployed,
           refusal(3, "the pointer was edited; refusing to use it")),
    Attack("an audit entry rewritten", audit_entry_rewritten,
           contains("holds another event (the entry was rewritten)")),
]
# Only a real S3 server behind the fault proxy can fail the audit write after the swap.
S3_POLICY_ATTACKS = [Attack("the audit write fails after the swap", audit_write_fails,
                            reported_done_and_repaired)]
