"""The attacks on the promotion policy: every way around it with the tool's own commands
(tests/reliability/test_custody.py runs them, against the local store and S3).

The releases are published by the library function the publish stage calls, with the
gate results a run records (tests/support/recorded.py): the attacks are on what happens
to releases afterwards, and a measured 45 ms p99 cannot be ordered from a real server.
"""

from __future__ import annotations

from pipeline.digest import sha256_bytes
from pipeline.release.manifest import manifest_key
from pipeline.release.store.base import blob_key
from pipeline.release.store.s3 import S3Store
from tests.support.custody import (
    Attack,
    CliResult,
    CustodyWorld,
    Judged,
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
    with world.proxy.faults(FaultRule(("slowdown",), probability=1.0, methods=["PUT"],
                                      path=r"/audit/")):
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
]
# Only a real S3 server behind the fault proxy can fail the audit write after the swap.
S3_POLICY_ATTACKS = [Attack("the audit write fails after the swap", audit_write_fails,
                            reported_done_and_repaired)]
