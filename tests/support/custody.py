"""Chain-of-custody attacks: a world (a project, its store, keys, an OIDC issuer), attacks
as records that each run one way around the chain (usually ending in one CLI command),
and the tally of how they came out.

    Attack(name, run: Callable[[CustodyWorld], R], expect: Judge)
    Judge(result, world) -> Judged(refused, wrong)   # wrong: None, or what went wrong
    tally(attacks, world) -> Tally                   # Tally.line() is the suite's line

`refused` is whether the attack did not get through (for a fault after the pointer
moved: the move was not reported as failed); `wrong` says why it was not refused for
its own reason. The suite prints `custody: attacks=N refused=N wrong_reason=0`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from pipeline.digest import canonical_json, sha256_bytes
from pipeline.release.manifest import (
    BlobSource,
    manifest_key,
    new_release_id,
    publish_release,
    utc_now,
)
from pipeline.release.manifest_record import Manifest
from pipeline.release.pointer_event import PointerAction
from pipeline.release.pointers import move_pointer, read_pointer
from pipeline.release.signing.approval_record import Approval
from pipeline.release.signing.approvals import write_approval
from pipeline.release.signing.attestation import attestation_blob
from pipeline.release.signing.keys import FileSigner
from pipeline.release.store.base import Store
from tests.support.faultproxy import FaultProxy
from tests.support.oidc_issuer import Issuer
from tests.support.recorded import recorded

CliResult = subprocess.CompletedProcess[str]
NAME = "fraud-mlp"
KEY_NAMES = ("ci", "rita", "alice", "bob", "mallory")


def write_keys(folder: Path, names: Sequence[str] = KEY_NAMES) -> dict[str, Path]:
    """An Ed25519 key pair per name: `<name>.pem` (private) and `<name>.pub`."""
    folder.mkdir(parents=True, exist_ok=True)
    found = {}
    for name in names:
        key = ed25519.Ed25519PrivateKey.generate()
        (folder / f"{name}.pem").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        (folder / f"{name}.pub").write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        found[name] = folder / f"{name}.pem"
    return found


SHIPPED_PRODUCTION = Path(__file__).resolve().parents[2] / "environments" / "production.yaml"


def key_entry(name: str, owner: str | None = None) -> dict[str, str]:
    return {"id": name, "public_key": f"keys/{name}.pub",
            **({"owner": f"github:{owner}"} if owner else {})}


def overlay(verified_identity: bool = False, oidc_issuers: Sequence[str] = ()) -> str:
    """The shipped production overlay (staging first, its stricter gates, no inconclusive
    result), with a signed attestation by ci (or alice) and a signed approval by someone
    other than the creator (optionally by an OIDC-verified identity), trusting the test's
    keys, and the OIDC issuers `oidc_issuers` (default: GitHub's). JSON, which is YAML."""
    shipped = yaml.safe_load(SHIPPED_PRODUCTION.read_text())
    shipped["attestation"] = {"required": True,
                              "keys": [key_entry("ci"), key_entry("alice", "alice")]}
    shipped["approval"] = {"required": True, "distinct_from_creator": True,
                           "verified_identity": verified_identity,
                           "keys": [key_entry("rita"), key_entry("alice", "alice"),
                                    key_entry("bob")],
                           "approvers": ["rita", "alice", "bob"]}
    if oidc_issuers:
        shipped["approval"]["oidc_issuers"] = list(oidc_issuers)
    return json.dumps(shipped, indent=2) + "\n"


def verified_creator(actor: str) -> dict[str, Any]:
    return {"user": f"{actor}@github-actions", "via": "github-actions", "verified": True,
            "verified_identities": [f"github:{actor}"]}


@dataclass
class CustodyWorld:
    """A project whose `production` and `audited` environments need signed evidence, a
    store (local or S3 over HTTP), key pairs under `keys/` and a local OIDC issuer."""

    project: Path
    store: Store
    env: dict[str, str]
    keys: dict[str, Path]
    issuer: Issuer
    backend: str
    overwrite: Callable[[str, bytes], None]
    proxy: FaultProxy | None = None
    published: list[str] = field(default_factory=list)

    def cli(self, *args: str, env: Mapping[str, str] | None = None) -> CliResult:
        full = {**self.env, **(env or {})}
        return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=self.project,
                              text=True, capture_output=True, timeout=120, env=full)

    def publish(self, payload: bytes, signer: str | None = "ci",
                creator: Mapping[str, Any] | None = None, name: str = NAME,
                **gates: Any) -> str:
        """A release as stages/publish writes one: blobs, the attestation, the manifest,
        with the gate results a run records (tests/support/recorded.py, `gates`)."""
        config = b"max_batch_size: 8\n" + payload[:8]
        spec = canonical_json({"spec": {"name": name}, "payload": sha256_bytes(payload)})
        body_gates = recorded(**gates)
        stages = [{"name": "latency", "status": "passed", "message": "",
                   "gates": [g for g in body_gates["gates"] if g["stage"] == "latency"]}]
        verification = canonical_json({"run_id": "run-1", "stages": stages})
        files = [BlobSource("model", None, payload, sha256_bytes(payload)),
                 BlobSource("config.pbtxt", None, config, sha256_bytes(config)),
                 BlobSource("spec", None, spec, sha256_bytes(spec)),
                 BlobSource("verification", None, verification, sha256_bytes(verification))]
        body: dict[str, Any] = {
            "run_id": "run-1", "created_by": "alice", "verified_in": "staging",
            "created_by_actor": dict(creator or {"user": "alice@build", "via": "local",
                                                 "verified": False}),
            "spec_digest": "sha256:" + sha256_bytes(spec),
            "model": {"sha256": sha256_bytes(payload)},
            "config": {"file": "config.pbtxt", "sha256": sha256_bytes(config)},
            "image": None, **body_gates}
        key = FileSigner.from_file(self.keys[signer]) if signer else None
        moment = utc_now()
        draft = replace(Manifest.from_json(body), release_id=new_release_id(moment, name))
        attestation, draft = attestation_blob(name, files, draft, key)
        files.append(attestation)
        release = publish_release(self.store, name, files, draft, moment).release_id
        self.published.append(release)
        return release

    def staged(self, payload: bytes, **publish: Any) -> str:
        release = self.publish(payload, **publish)
        move_pointer(self.store, NAME, "staging", release, PointerAction.PROMOTE, "ci")
        return release

    def approve(self, release: str, key: str = "rita", environment: str = "production",
                env: Mapping[str, str] | None = None, by: str | None = None) -> CliResult:
        args = ["approve", release, "--env", environment, "--key", str(self.keys[key]),
                "--yes", "--by", by or key]
        return self.cli(*args, env=env)

    def sign_directly(self, release: str, key: str, environment: str = "production",
                      by: str = "someone") -> Approval:
        """An approval written by a client that skips `approve`'s own checks."""
        pointer, _ = read_pointer(self.store, NAME, environment)
        data = self.store.read(manifest_key(NAME, release))
        assert data is not None
        return write_approval(self.store, NAME, release, sha256_bytes(data), environment,
                              pointer, FileSigner.from_file(self.keys[key]), by,
                              {"user": f"{by}@laptop", "via": "local", "verified": False})

    def approvals_of(self, release: str, environment: str = "production") -> list[str]:
        found = []
        for key in self.store.list(f"audit/{NAME}/"):
            if f"-approve-{environment}-" in key:
                entry = json.loads(self.store.read(key) or b"{}")
                if entry.get("release_id") == release:
                    found.append(key)
        return found

    def promote(self, environment: str, release: str) -> CliResult:
        return self.cli("promote", environment, "--release", release)

    def current(self, environment: str) -> str | None:
        return read_pointer(self.store, NAME, environment)[0].current


@dataclass(frozen=True)
class Judged:
    refused: bool
    wrong: str | None = None        # None: for its own reason


Judge = Callable[[Any, CustodyWorld], Judged]


@dataclass(frozen=True)
class Attack:
    name: str
    run: Callable[[CustodyWorld], Any]
    expect: Judge


def contains(text: str) -> Judge:
    """Refused: a non-zero exit; for its reason: its output holds `text`."""
    def judge(result: CliResult, world: CustodyWorld) -> Judged:
        output = result.stdout + result.stderr
        return Judged(result.returncode != 0,
                      None if text in output else output.strip()[-600:])
    return judge


def refusal(exit_code: int, reason: str) -> Judge:
    """Refused: a non-zero exit; for its reason: this exit code and a single stderr line,
    the error, holding `reason`."""
    def judge(result: CliResult, world: CustodyWorld) -> Judged:
        lines = result.stderr.strip().splitlines()
        right = result.returncode == exit_code and len(lines) == 1 and \
            lines[0].startswith("error: ") and reason in lines[0]
        return Judged(result.returncode != 0, None if right else
                      f"exit {result.returncode}: "
                      f"{result.stderr.strip()[-600:] or result.stdout[-600:]}")
    return judge


@dataclass(frozen=True)
class Outcome:
    name: str
    refused: bool
    wrong: str | None


@dataclass(frozen=True)
class Tally:
    outcomes: tuple[Outcome, ...] = ()

    @property
    def attacks(self) -> int:
        return len(self.outcomes)

    @property
    def refused(self) -> int:
        return sum(o.refused for o in self.outcomes)

    @property
    def wrong_reason(self) -> int:
        return sum(o.refused and o.wrong is not None for o in self.outcomes)

    def failures(self) -> list[str]:
        return [f"{o.name}: {'refused for another reason' if o.refused else 'ACCEPTED'}: "
                f"{o.wrong}" for o in self.outcomes if not o.refused or o.wrong is not None]

    def line(self, label: str = "custody") -> str:
        return (f"{label}: attacks={self.attacks} refused={self.refused} "
                f"wrong_reason={self.wrong_reason}")

    def __add__(self, other: Tally) -> Tally:
        return Tally(self.outcomes + other.outcomes)


def tally(attacks: Sequence[Attack], world: CustodyWorld | None,
          label: str | None = None) -> Tally:
    """Run every attack in order against `world` (None: attacks on something else, named
    by `label`); a setup that raises is a test error."""
    outcomes = []
    for attack in attacks:
        judged = attack.expect(attack.run(world), world)  # type: ignore[arg-type]
        outcomes.append(Outcome(f"{label or (world and world.backend)}/{attack.name}",
                                judged.refused, judged.wrong))
    return Tally(tuple(outcomes))


def base_env() -> dict[str, str]:
    """The CLI's environment without anything that would make it act as someone."""
    drop = ("GITHUB_", "ACTIONS_ID_TOKEN_", "SERVE_PIPELINE_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}
