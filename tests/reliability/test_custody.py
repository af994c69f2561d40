"""Chain of custody: every way around the promotion policy and its signed evidence, as an
attack through the real CLI, against the local store and against moto's S3 API over HTTP
(behind the fault proxy); the legitimate path (staging, a signed approval by another
verified identity, production, rollback) still passes; `verify` checks a copied store with
public keys alone; secrets planted in the pipeline's environment never reach a real
Triton's or TorchServe's processes.

The attacks: tests/support/custody_policy.py (the policy: rollback, gates, another spec,
withdrawn, a corrupt blob at publish, an audit write failing after the swap) and
tests/support/custody_signed.py (signatures, approvals, identities).

Ends with one line: custody: attacks=N refused=N wrong_reason=0
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from pipeline.release.manifest import manifest_key
from pipeline.release.store import open_store
from pipeline.release.store.base import blob_key
from pipeline.servers import serving
from pipeline.servers.specs import load_spec
from tests.support.custody import (
    NAME,
    Attack,
    CliResult,
    CustodyWorld,
    Judged,
    Tally,
    base_env,
    overlay,
    tally,
    write_keys,
)
from tests.support.custody_policy import POLICY_ATTACKS, S3_POLICY_ATTACKS
from tests.support.custody_signed import SIGNED_ATTACKS
from tests.support.faultproxy import FaultProxy
from tests.support.moto_s3 import S3Server
from tests.support.oidc_issuer import Issuer, local_issuer
from tests.support.specs import fast_spec, quick_torchserve_spec

pytestmark = [pytest.mark.integration, pytest.mark.reliability]


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    with local_issuer() as running:
        yield running


def _prepare(project: Path, store_url: str | None, issuer: Issuer) -> dict[str, Path]:
    keys = write_keys(project / "keys")
    (project / "environments" / "production.yaml").write_text(
        overlay(oidc_issuers=[issuer.url]))
    (project / "environments" / "audited.yaml").write_text(
        overlay(verified_identity=True, oidc_issuers=[issuer.url]))
    if store_url is not None:
        spec = project / "serve.yaml"
        spec.write_text(spec.read_text().replace("store: file://.serve-pipeline/store",
                                                 f"store: {store_url}"))
    return keys


@pytest.fixture(params=["local", "s3"])
def world(request: pytest.FixtureRequest, project: Path, issuer: Issuer
          ) -> Iterator[CustodyWorld]:
    env = base_env()
    if request.param == "local":
        keys = _prepare(project, None, issuer)
        store = open_store("file://.serve-pipeline/store", project)
        root = project / ".serve-pipeline" / "store"

        def overwrite(key: str, data: bytes) -> None:
            (root / key).write_bytes(data)

        yield CustodyWorld(project, store, env, keys, issuer, "local", overwrite)
        return
    s3: S3Server = request.getfixturevalue("s3_env")
    bucket = s3.new_bucket()
    keys = _prepare(project, f"s3://{bucket}/ml", issuer)
    store = open_store(f"s3://{bucket}/ml", project, s3.endpoint)
    client = s3.client()

    def put(key: str, data: bytes) -> None:
        client.put_object(Bucket=bucket, Key=f"ml/{key}", Body=data)

    with FaultProxy(s3.endpoint, timeout=30, lifetime=600) as proxy:
        cli_env = {**env, **s3.env, "AWS_ENDPOINT_URL_S3": proxy.url,
                   "AWS_ENDPOINT_URL_STS": s3.endpoint}
        yield CustodyWorld(project, store, cli_env, keys, issuer, "s3", put, proxy)


class CustodyReport:
    """Registered as a plugin by the first test here: pytest calls it after the run (output
    written during a test is captured), with every attack's outcome and the tally line."""

    def __init__(self) -> None:
        self.total = Tally()

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for outcome in self.total.outcomes:
            verdict = "refused" if outcome.refused and outcome.wrong is None else \
                f"WRONG: {outcome.wrong}"
            terminalreporter.write_line(f"  custody {outcome.name}: {verdict}")
        terminalreporter.write_line(self.total.line("custody"))


def record(request: pytest.FixtureRequest, outcome: Tally) -> None:
    manager = request.config.pluginmanager
    report = manager.get_plugin("custody-report")
    if report is None:
        report = CustodyReport()
        manager.register(report, "custody-report")
    report.total = report.total + outcome
    assert outcome.failures() == []


ALL_POLICY = POLICY_ATTACKS + S3_POLICY_ATTACKS


@pytest.mark.parametrize("attack", [a.name for a in ALL_POLICY])
def test_every_policy_attack_is_refused_for_its_reason(
        attack: str, world: CustodyWorld, request: pytest.FixtureRequest) -> None:
    chosen = [a for a in ALL_POLICY if a.name == attack]
    if chosen[0] in S3_POLICY_ATTACKS and world.proxy is None:
        pytest.skip("the local store cannot fail only the audit write (no real fault)")
    record(request, tally(chosen, world))


# On the local store only: a signature is checked on the bytes read back, the same code
# for every backend, and the S3 path's own faults are the policy attacks' above (62 s a
# run on S3 told nothing the local run does not).
@pytest.mark.parametrize("world", ["local"], indirect=True)
def test_every_signature_attack_is_refused_for_its_reason(
        world: CustodyWorld, request: pytest.FixtureRequest) -> None:
    record(request, tally(SIGNED_ATTACKS, world))
    production = json.loads(world.cli("history", "production", "--format", "json").stdout)
    moved = {e["release_id"] for e in production["events"]}
    assert len(moved) == 2, "only the replay's two legitimate releases reached production"


def test_the_legitimate_path_passes(world: CustodyWorld) -> None:
    """staging, a signed approval by rita (verified through the job's OIDC token),
    production, again, rollback: all exit 0, and `store verify` finds nothing."""
    first = world.publish(b"model-v1")
    second = world.publish(b"model-v2")
    verified_rita = world.issuer.env()            # a job's token request, as GitHub does
    for release in (first, second):
        assert world.promote("staging", release).returncode == 0
        approved = world.approve(release, env=verified_rita)
        assert approved.returncode == 0, approved.stderr
        assert "(verified identity)" in approved.stdout
        moved = world.cli("promote", "production")          # the release staging has
        assert moved.returncode == 0, moved.stderr
    assert world.current("production") == second
    back = world.cli("rollback", "production")
    assert back.returncode == 0, back.stderr
    history = json.loads(world.cli("history", "production", "--format", "json").stdout)
    assert history["current"] == first
    assert [e["approved_by"] for e in history["events"][:2]] == [["rita"], ["rita"]]
    entry = json.loads(world.store.read(world.approvals_of(second)[0]) or b"")
    assert entry["actor"]["verified"] is True
    assert entry["actor"]["oidc"]["actor"] == "rita"
    assert entry["actor"]["verified_identities"] == ["github:rita"]
    audited = world.staged(b"model-v3")
    assert world.approve(audited, environment="audited", env=verified_rita).returncode == 0
    assert world.promote("audited", audited).returncode == 0
    checked = world.cli("store", "verify")
    assert checked.returncode == 0, checked.stdout


def _copy_store(world: CustodyWorld, destination: Path) -> Path:
    """The store as another machine would receive it: every object, in a directory."""
    for key in world.store.list(""):
        target = destination / key
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(world.store.read(key) or b"")
    return destination


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_verify_a_copied_store_with_public_keys_alone(world: CustodyWorld,
                                                      tmp_path: Path) -> None:
    release = world.staged(b"model-to-verify")
    assert world.approve(release).returncode == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    keys = [str(world.project / "keys" / f"{n}.pub") for n in ("ci", "rita")]

    def verify(store: Path) -> CliResult:
        args = ["verify", release, "--store", f"file://{store}", "--format", "json"]
        for key in keys:
            args += ["--public-key", key]
        return _cli_in(world, elsewhere, args)

    copy = _copy_store(world, tmp_path / "copy")
    passed = verify(copy)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    report = json.loads(passed.stdout)
    assert report["attestation"]["signer"] == "ci" and report["ok"] is True
    assert [a["approver"] for a in report["approvals"]] == ["rita"]

    manifest = json.loads((copy / manifest_key(NAME, release)).read_bytes())
    digests = {b["role"]: b["digest"] for b in manifest["blobs"]}
    approval = next(p for p in (copy / "audit" / NAME).glob("*-approve-production-*"))
    targets = {"subject blob": copy / blob_key(digests["model"]),
               "attestation": copy / blob_key(digests["attestation"]),
               "approval": approval}
    for what, path in targets.items():
        broken = _copy_store(world, tmp_path / f"broken-{what.replace(' ', '-')}")
        _flip(broken / path.relative_to(copy), len(path.read_bytes()) // 2)
        failed = verify(broken)
        assert failed.returncode == 1, f"{what}: {failed.stdout}{failed.stderr}"
        assert json.loads(failed.stdout)["problems"], what


def _cli_in(world: CustodyWorld, folder: Path, args: list[str]) -> CliResult:
    """The CLI run in a folder with no spec and no store credentials: offline."""
    env = {k: v for k, v in world.env.items() if not k.startswith("AWS_")}
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=folder, text=True,
                          capture_output=True, timeout=120, env=env)


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


def secrets_attack(name: str, run: Callable[[], tuple[list[str], int]],
                   minimum: int) -> Attack:
    """Refused: no planted secret in any process of the server's tree; for its reason:
    the model's processes were up to be read."""
    def expect(result: tuple[list[str], int], world: object) -> Judged:
        leaks, processes = result
        if leaks:
            return Judged(False, f"planted secrets in {leaks}")
        return Judged(True, None if processes >= minimum else
                      f"only {processes} processes seen (the model's processes were not up)")
    return Attack(f"{name}: secrets in the model's processes", lambda world: run(), expect)


def test_triton_and_its_stubs_never_see_the_store_credentials(
        project: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    spec = fast_spec((project / "serve.yaml").read_text(), instances=2)
    # tritonserver and one python-backend stub per instance, where the model runs.
    attack = secrets_attack("triton", lambda: secrets_stay_out(
        spec, tmp_path / "triton", project, "."), 3)
    record(request, tally([attack], None, "server"))


def test_torchserve_and_its_workers_never_see_the_store_credentials(
        project: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    # The launcher, the JVM frontend and at least one Python worker with the model.
    attack = secrets_attack("torchserve", lambda: secrets_stay_out(
        quick_torchserve_spec(), tmp_path / "ts", project, "examples/torchserve"), 2)
    record(request, tally([attack], None, "server"))
