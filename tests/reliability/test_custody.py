"""Chain of custody, the policy's part: every way around the promotion policy, as an attack
through the real CLI, against the local store and against moto's S3 API over HTTP (behind
the fault proxy); the legitimate path still passes. Secrets planted in the pipeline's
environment never reach a real Triton's or TorchServe's processes.

The releases are published by the library function the publish stage calls, with the
gate results a run records (tests/support/recorded.py): the attacks are on what happens
to releases afterwards, and a measured 45 ms p99 cannot be ordered from a real server.

Ends with one line: custody: attacks=N refused=N wrong_reason=0
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from pipeline.digest import canonical_json, sha256_bytes
from pipeline.release.manifest import BlobSource, manifest_key, publish_release, utc_now
from pipeline.release.pointers import move_pointer, read_pointer
from pipeline.release.promotion import approve
from pipeline.release.store import open_store
from pipeline.release.store.base import Store, blob_key
from pipeline.release.store.s3 import S3Store
from pipeline.servers import serving
from pipeline.spec.loading import load_spec
from tests.support.custody_policy import Attack, Outcome, refusal, tally
from tests.support.faultproxy import FaultProxy, FaultRule
from tests.support.moto_s3 import S3Server
from tests.support.recorded import recorded
from tests.support.specs import fast_spec, quick_torchserve_spec

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

NAME = "fraud-mlp"
PRODUCTION = (Path(__file__).resolve().parents[2] / "environments" / "production.yaml").read_text()
# The shipped overlay, with approvals by someone other than the creator.
POLICY = PRODUCTION.replace("approval: {required: true}",
                            "approval: {required: true, distinct_from_creator: true}")
TOTALS: dict[str, int] = {"attacks": 0, "refused": 0, "wrong_reason": 0}


@dataclass
class World:
    """A project on a store, the CLI's environment, and a direct handle to the store."""

    project: Path
    env: dict[str, str]
    store: Store
    proxy: FaultProxy | None = None

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=self.project,
                              text=True, capture_output=True, timeout=240, env=self.env)

    def publish(self, payload: bytes, name: str = NAME, **gates: Any) -> str:
        """A release as a run publishes it: model, spec and verification blobs; gates."""
        body = {"run_id": f"run-{sha256_bytes(payload)[:6]}", "created_by": "alice",
                "created_by_actor": {"user": "alice@build-host", "via": "local"},
                "verified_in": "staging", **recorded(**gates)}
        spec = canonical_json({"spec": {"name": name}, "environment": "staging"})
        stages = [{"name": "latency", "status": "passed", "message": "",
                   "gates": [g for g in body["gates"] if g["stage"] == "latency"]}]
        verification = canonical_json({"run_id": body["run_id"], "stages": stages})
        sources = [BlobSource("model", None, payload, sha256_bytes(payload)),
                   BlobSource("spec", None, spec, sha256_bytes(spec)),
                   BlobSource("verification", None, verification, sha256_bytes(verification))]
        return publish_release(self.store, name, sources, body, utc_now()).release_id

    def current(self, environment: str) -> str | None:
        return read_pointer(self.store, NAME, environment)[0].current


def make_project(project: Path, store_url: str) -> None:
    spec = (project / "serve.yaml").read_text()
    (project / "serve.yaml").write_text(spec.replace("store: file://.serve-pipeline/store",
                                                     f"store: {store_url}"))
    (project / "environments" / "production.yaml").write_text(POLICY)


@pytest.fixture(params=["local", "s3"])
def world(request: pytest.FixtureRequest, project: Path) -> Iterator[World]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    if request.param == "local":
        make_project(project, "file://.serve-pipeline/store")
        yield World(project, env, open_store("file://.serve-pipeline/store", project))
        return
    s3: S3Server = request.getfixturevalue("s3_env")
    url = f"s3://{s3.new_bucket()}/team"
    make_project(project, url)
    with FaultProxy(s3.endpoint, timeout=30, lifetime=600) as proxy:
        env.update({**s3.env, "AWS_ENDPOINT_URL_S3": proxy.url,
                    "AWS_ENDPOINT_URL_STS": s3.endpoint})
        yield World(project, env, open_store(url, project, s3.endpoint), proxy)


def staged(world: World, payload: bytes, **gates: Any) -> str:
    release = world.publish(payload, **gates)
    move_pointer(world.store, NAME, "staging", release, "promote", "ci")
    return release


def approved(world: World, release: str) -> str:
    approve(world.store, NAME, release, "production", "rita")
    return release


# ---------------------------------------------------------------- the attacks


def rollback_to_never_live(world: World) -> subprocess.CompletedProcess[str]:
    live = approved(world, staged(world, b"live"))
    assert world.cli("promote", "production", "--release", live).returncode == 0
    never = world.publish(b"never staged")
    return world.cli("rollback", "production", "--to", never)


def slower_than_production(world: World) -> subprocess.CompletedProcess[str]:
    slow = approved(world, staged(world, b"slow", p99_ms=45.0, p99_high_ms=47.0))
    return world.cli("promote", "production", "--release", slow)


def another_spec(world: World) -> subprocess.CompletedProcess[str]:
    other = world.publish(b"other model", name="other-model")
    copied = world.store.read(manifest_key("other-model", other))
    assert copied is not None
    world.store.create(manifest_key(NAME, other), copied)
    return world.cli("promote", "staging", "--release", other)


def inconclusive_to_production(world: World) -> subprocess.CompletedProcess[str]:
    unsure = approved(world, staged(world, b"unsure", p99_ms=30.0, p99_high_ms=52.0,
                                    p99_outcome="inconclusive"))
    return world.cli("promote", "production", "--release", unsure)


def withdrawn_from_staging(world: World) -> subprocess.CompletedProcess[str]:
    staged(world, b"good")
    bad = approved(world, staged(world, b"bad"))
    assert world.cli("rollback", "staging").returncode == 0
    return world.cli("promote", "production", "--release", bad)


def corrupt_blob_at_publish(world: World) -> subprocess.CompletedProcess[str]:
    payload = b"model that was once uploaded badly" * 100
    corrupt = b"not the model"
    if world.proxy is None:
        path = world.project / ".serve-pipeline" / "store" / blob_key(sha256_bytes(payload))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(corrupt)
    else:   # what a writer with bucket access can do: other bytes, our digest's metadata
        s3 = world.store
        assert isinstance(s3, S3Store)
        s3.client.put_object(Bucket=s3.bucket, Key=s3._key(blob_key(sha256_bytes(payload))),
                             Body=corrupt, Metadata={"sha256": sha256_bytes(payload)})
    release = world.publish(payload)
    return world.cli("promote", "staging", "--release", release)


def blob_replaced(result: subprocess.CompletedProcess[str], world: World) -> str | None:
    if result.returncode != 0:
        return f"the promotion after publish failed: {result.stderr.strip()}"
    digest = sha256_bytes(b"model that was once uploaded badly" * 100)
    problem = world.store.verify_blob(digest)
    return None if problem is None else f"the corrupt blob is still there: {problem}"


def audit_write_fails(world: World) -> subprocess.CompletedProcess[str]:
    release = staged(world, b"audited")
    approved(world, release)
    assert world.proxy is not None
    with world.proxy.faults(FaultRule(("slowdown",), probability=1.0, methods=["PUT"],
                                      path=r"/audit/")):
        return world.cli("promote", "production", "--release", release)


def reported_done_and_repaired(result: subprocess.CompletedProcess[str],
                               world: World) -> str | None:
    if result.returncode != 0:
        return f"exit {result.returncode} after the swap: {result.stderr.strip()}"
    if "warning: production points at" not in result.stderr or \
            "store verify --repair" not in result.stderr:
        return f"no warning about the audit entry: {result.stderr.strip()!r}"
    if world.current("production") is None:
        return "the pointer did not move"
    before = world.cli("store", "verify")
    repaired = world.cli("store", "verify", "--repair")
    after = world.cli("store", "verify")
    if "has no audit entry" not in before.stdout or repaired.returncode != 0 or \
            after.returncode != 0:
        return f"store verify did not find and repair it: {before.stdout} {after.stdout}"
    return None


ATTACKS = [
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
S3_ATTACKS = [Attack("the audit write fails after the swap", audit_write_fails,
                     reported_done_and_repaired)]


def legitimate_path(world: World) -> None:
    """staging, an approval by someone else, production, again, rollback: all exit 0."""
    first, second = world.publish(b"first"), world.publish(b"second")
    for release in (first, second):
        steps = [("promote", "staging", "--release", release),
                 ("approve", release, "--env", "production", "--by", "rita", "--yes"),
                 ("promote", "production")]
        for step in steps:
            result = world.cli(*step)
            assert result.returncode == 0, (step, result.stderr)
    assert world.current("production") == second
    back = world.cli("rollback", "production")
    assert back.returncode == 0, back.stderr
    assert world.current("production") == first
    checked = world.cli("store", "verify")
    assert checked.returncode == 0, checked.stdout


class CustodyReport:
    """Registered as a plugin by the first test here: pytest calls it after the run (output
    written during a test is captured), with every attack's outcome and the tally line."""

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for outcome in self.outcomes:
            verdict = "refused" if outcome.refused else f"WRONG: {outcome.detail}"
            terminalreporter.write_line(f"  custody {outcome.attack}: {verdict}")
        terminalreporter.write_line(
            "custody: " + " ".join(f"{key}={value}" for key, value in TOTALS.items()))


def record(request: pytest.FixtureRequest, counts: tuple[int, int, int],
           outcomes: list[Outcome]) -> None:
    for key, value in zip(TOTALS, counts, strict=True):
        TOTALS[key] += value
    manager = request.config.pluginmanager
    report = manager.get_plugin("custody-report")
    if report is None:
        report = CustodyReport()
        manager.register(report, "custody-report")
    report.outcomes.extend(outcomes)


@pytest.mark.parametrize("attack", [a.name for a in ATTACKS + S3_ATTACKS])
def test_every_attack_is_refused_for_its_reason(attack: str, world: World,
                                                request: pytest.FixtureRequest) -> None:
    chosen = [a for a in ATTACKS + S3_ATTACKS if a.name == attack]
    if chosen[0] in S3_ATTACKS and world.proxy is None:
        pytest.skip("the local store cannot fail only the audit write (no real fault)")
    outcomes: list[Outcome] = []
    counts = tally(chosen, world, outcomes)
    record(request, counts, outcomes)
    assert counts[2] == 0, outcomes[0].detail


def test_the_legitimate_path_passes(world: World) -> None:
    legitimate_path(world)


# ---------------------------------------------------------------- secrets and model code

PLANTED = {"AWS_SECRET_ACCESS_KEY": "planted-secret-key", "AWS_ACCESS_KEY_ID": "AKIAPLANTED",
           "AWS_SESSION_TOKEN": "planted-session", "GITHUB_TOKEN": "ghp_planted",
           "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "planted-oidc",
           "ACTIONS_ID_TOKEN_REQUEST_URL": "http://127.0.0.1:1/planted",
           "SERVE_PIPELINE_SIGNING_KEY": "planted-signing-key"}


def environments_of(pid: int) -> dict[int, dict[str, str]]:
    """Every process of the tree under `pid` and its environment, from /proc."""
    found = {}
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        raw = Path(f"/proc/{process.pid}/environ").read_bytes()
        found[process.pid] = dict(item.split("=", 1) for item in raw.decode(
            errors="replace").split("\0") if "=" in item)
    return found


def leaked(trees: dict[int, dict[str, str]]) -> list[str]:
    return [f"{pid}: {key}" for pid, env in trees.items() for key, value in env.items()
            if key in PLANTED or value in PLANTED.values()]


def secrets_stay_out(spec_text: str, workdir: Path, project: Path,
                     folder: str) -> tuple[list[str], int]:
    spec = project / folder / "serve.yaml"
    spec.write_text(spec_text)
    env = {**os.environ, **PLANTED}
    with serving(load_spec(spec, None), workdir, env=env) as server:
        assert server.process is not None
        trees = environments_of(server.process.pid)
    return leaked(trees), len(trees)


def secrets_attack(run: Callable[[], tuple[list[str], int]], minimum: int) -> Attack:
    def expect(result: tuple[list[str], int], world: object) -> str | None:
        leaks, processes = result
        if processes < minimum:
            return f"only {processes} processes seen (the model's processes were not up)"
        return f"planted secrets in {leaks}" if leaks else None
    return Attack("secrets in the model's processes", lambda world: run(), expect)


def test_triton_and_its_stubs_never_see_the_store_credentials(
        project: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    spec = fast_spec((project / "serve.yaml").read_text(), instances=2)
    # tritonserver and one python-backend stub per instance, where the model runs.
    attack = secrets_attack(lambda: secrets_stay_out(spec, tmp_path / "triton", project, "."),
                            3)
    outcomes: list[Outcome] = []
    counts = tally([attack], None, outcomes)
    record(request, counts, outcomes)
    assert counts[2] == 0, outcomes[0].detail


def test_torchserve_and_its_workers_never_see_the_store_credentials(
        project: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    # The launcher, the JVM frontend and at least one Python worker with the model.
    attack = secrets_attack(lambda: secrets_stay_out(
        quick_torchserve_spec(), tmp_path / "ts", project, "examples/torchserve"), 2)
    outcomes: list[Outcome] = []
    counts = tally([attack], None, outcomes)
    record(request, counts, outcomes)
    assert counts[2] == 0, outcomes[0].detail
