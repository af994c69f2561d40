"""The refusal matrix: deliberately bad releases, each refused by the gate named for it.

Real tritonserver, real CLI processes, moto's S3 server over HTTP. A bad release refused by
another gate, a crash or a timeout counts as `wrong_reason`; the bundled example must still
pass. The session ends with `gates: bad_releases=N refused=N wrong_reason=N good_passed=N`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cli import cli
from tests.support.custody import write_keys
from tests.support.moto_s3 import S3Server
from tests.support.refusals import (
    TIGHT_SLO,
    GateVerdict,
    Matrix,
    bad_model_source,
    exit_verdict,
    gate_verdict,
    make_project,
    matrix_of,
    replace_once,
)

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

RELEASE = re.compile(r"^release (\S+)$", re.MULTILINE)
MEASURE = ["run", "--stages", "parity,latency"]
APPROVAL = "requires: [staging]\napproval: {required: true}\n"


@pytest.fixture(scope="session")
def matrix(request: pytest.FixtureRequest) -> Matrix:
    return matrix_of(request.config)


def judged(matrix: Matrix, case: str, verdict: GateVerdict) -> None:
    matrix.bad_release(case, verdict.verdict)
    print(f"{case}: {verdict.verdict}: {verdict.why}")
    assert verdict.verdict == "refused", f"{case}: {verdict.verdict}: {verdict.why}"


# ------------------------------------------------------------------ gates of the stages

@pytest.mark.parametrize(("case", "behaviour", "slo", "gate", "outcome"), [
    pytest.param(*case, id=case[0]) for case in [
        ("slow_tail", "slow_tail", TIGHT_SLO, "latency.p99", "failed"),
        ("error_burst", "error_burst", None, "latency.error_rate", "failed"),
        ("nondeterministic", "nondeterministic", None, "parity.deterministic", "failed"),
        ("wrong_output_dtype", "float64_output", None, "parity.output_dtype", "failed"),
        ("wrong_output_shape", "wrong_shape", None, "parity.output_contract", "failed"),
        ("nan_output", "nan_output", None, "parity.finite_outputs", "failed"),
        ("batch_dependent", "batch_dependent", None, "parity.batch_invariant", "failed"),
        ("memory_growth", "leak", None, "latency.memory_growth", "failed"),
    ]])
def test_a_bad_model_is_refused_by_its_gate(tmp_path: Path, matrix: Matrix, case: str,
                                            behaviour: str, slo: str | None, gate: str,
                                            outcome: str) -> None:
    project = make_project(tmp_path / case, behaviour=behaviour, slo=slo, saturation=False)
    judged(matrix, case, gate_verdict(project, MEASURE, gate, outcome))


def test_an_unstable_measurement_is_refused_by_p99(tmp_path: Path, matrix: Matrix) -> None:
    """Latency alternates between fast and slow phases (1.5 s each) with the p99 threshold
    between them. Windows of 0.25 s, at least a full cycle of them before any verdict: half
    the requests are slow, so the p99 of all of them is far over the threshold (a decided
    failure), or the windows are too far apart to decide (inconclusive); either way the
    p99 gate refuses the release."""
    project = make_project(tmp_path / "unstable", behaviour="phases", slo=TIGHT_SLO,
                           saturation=False,
                           # window_requests low enough that a window is not
                           # lengthened past 0.25 s for this slow model (to 60 s in all).
                           latency="{concurrency: 4, warmup: 500ms, duration: 4s, "
                                   "window_requests: 100, max_duration: 6s, "
                                   "stability: {windows: 12, max_windows: 16}}")
    judged(matrix, "unstable_measurement",
           gate_verdict(project, MEASURE, "latency.p99", ("failed", "inconclusive")))


# ------------------------------------------------------- one good release, then the store

@dataclass(frozen=True)
class Published:
    project: Path
    release: str

    @property
    def store(self) -> Path:
        return self.project / ".serve-pipeline" / "store"

    def manifest(self) -> dict[str, object]:
        path = self.store / "releases" / "fraud-mlp" / f"{self.release}.json"
        body: dict[str, object] = json.loads(path.read_text())
        return body

    def blob(self, role: str) -> Path:
        blobs = self.manifest()["blobs"]
        assert isinstance(blobs, list)
        digest = next(b["digest"] for b in blobs if b["role"] == role)
        return self.store / "blobs" / "sha256" / str(digest)

    def pointer(self, environment: str) -> bytes | None:
        path = self.store / "environments" / "fraud-mlp" / f"{environment}.json"
        return path.read_bytes() if path.exists() else None

    def releases(self) -> list[str]:
        return sorted(p.name for p in (self.store / "releases" / "fraud-mlp").iterdir())


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> \
        Iterator[Published]:
    """The good release: the bundled example (fast stages) promoted to staging."""
    project = make_project(tmp_path_factory.mktemp("good") / "example")
    keys = write_keys(project / "keys", ("alice",))       # the creator signs her release
    result = cli(["promote", "staging"], project, timeout=240,
                 env={**os.environ, "SERVE_PIPELINE_SIGNING_KEY": str(keys["alice"])})
    matrix_of(request.config).good_release(result.returncode == 0)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    yield Published(project, RELEASE.findall(result.stdout)[-1])


def test_the_bundled_example_passes(published: Published) -> None:
    assert published.pointer("staging") is not None


def test_a_self_approval_is_refused(published: Published, matrix: Matrix) -> None:
    """alice signed the release's attestation and approves it with the same key."""
    overlay = published.project / "environments" / "production.yaml"
    alice = "[{id: alice, public_key: keys/alice.pub}]"
    overlay.write_text("requires: [staging]\n"
                       f"attestation: {{required: true, keys: {alice}}}\n"
                       f"approval: {{required: true, distinct_from_creator: true, "
                       f"keys: {alice}}}\n")
    result = cli(["approve", published.release, "--env", "production", "--key",
                  str(published.project / "keys" / "alice.pem"), "--yes"], published.project)
    verdict = exit_verdict(result, 5)
    if verdict.verdict == "refused" and "was created by the same verified identity (key:" \
            not in result.stderr:
        verdict = GateVerdict("wrong_reason", verdict.why)
    if published.pointer("production") is not None or \
            any("-approve-" in p.name for p in (published.store / "audit").rglob("*")):
        verdict = GateVerdict("not_refused", verdict.why + "; an approval or a move was written")
    judged(matrix, "self_approval", verdict)


def test_a_tampered_single_part_blob_is_refused(published: Published, matrix: Matrix) -> None:
    (published.project / "environments" / "production.yaml").write_text(APPROVAL)
    blob = published.blob("model")
    original = blob.read_bytes()
    before = published.pointer("production")
    try:
        overwrite(blob, bytes(b ^ 0xFF for b in original[:64]) + original[64:])
        result = cli(["promote", "production", "--release", published.release],
                     published.project)
    finally:
        overwrite(blob, original)
    verdict = exit_verdict(result, 3)
    if published.pointer("production") != before:
        verdict = GateVerdict("not_refused", verdict.why + "; the production pointer moved")
    judged(matrix, "tampered_blob_single_part", verdict)


def test_an_unreadable_live_release_fails_the_regression_gate(published: Published,
                                                              matrix: Matrix) -> None:
    spec = published.project / "serve.yaml"
    spec.write_text(replace_once(spec.read_text(), "\nstages:\n",
                                 "\nstages:\n  regression: {gate: true}\n"))
    blob = published.blob("verification")
    original = blob.read_bytes()
    staging, releases = published.pointer("staging"), published.releases()
    try:
        blob.unlink()
        verdict = gate_verdict(published.project, ["promote", "staging"],
                               "regression.live_release", exit_code=3)
    finally:
        overwrite(blob, original)
    if verdict.verdict == "refused" and (published.pointer("staging") != staging
                                         or published.releases() != releases):
        verdict = GateVerdict("wrong_reason", verdict.why + "; but something was released")
    judged(matrix, "unreadable_live_release", verdict)


def overwrite(path: Path, data: bytes) -> None:
    """Write over a blob in place, as someone with write access to the store would."""
    if path.exists():
        path.chmod(0o644)
    path.write_bytes(data)


# ------------------------------------------------------------ a multipart blob in S3

PADDING_FLOATS = 17_000_000          # 68 MB of weights: over the 64 MiB multipart threshold


def test_a_tampered_multipart_blob_is_refused(tmp_path: Path, s3_server: S3Server,
                                              matrix: Matrix) -> None:
    import boto3.s3.transfer
    import torch

    from pipeline.release.store.s3_checksum import MULTIPART_THRESHOLD

    project = make_project(tmp_path / "big", saturation=False)
    (project / "big.py").write_text(bad_model_source(
        "padded", "        self.register_buffer('padding', torch.zeros(PADDING))".replace(
            "PADDING", str(PADDING_FLOATS))))
    weights = torch.load(project / "examples" / "mlp" / "weights.pt")
    weights["padding"] = torch.rand(PADDING_FLOATS, generator=torch.Generator().manual_seed(1))
    torch.save(weights, project / "big.pt")
    assert (project / "big.pt").stat().st_size > MULTIPART_THRESHOLD
    bucket = s3_server.new_bucket()
    spec = project / "serve.yaml"
    text = replace_once(spec.read_text(), "source: examples/mlp/model.pt", "source: big.pt")
    text = replace_once(text, "format: torchscript", "format: eager\n  entrypoint: big.py:build")
    spec.write_text(replace_once(text, "store: file://.serve-pipeline/store",
                                 f"store: s3://{bucket}/releases"))
    (project / "environments" / "production.yaml").write_text(APPROVAL)
    staged = cli(["promote", "staging"], project, timeout=240, env=s3_server.env)
    assert staged.returncode == 0, staged.stdout[-2000:] + staged.stderr[-2000:]
    release = RELEASE.findall(staged.stdout)[-1]

    client = s3_server.client()
    manifest = json.loads(client.get_object(
        Bucket=bucket, Key=f"releases/releases/fraud-mlp/{release}.json")["Body"].read())
    blob = next(b for b in manifest["blobs"] if b["role"] == "model")
    key = f"releases/blobs/sha256/{blob['digest']}"
    head = client.head_object(Bucket=bucket, Key=key)
    assert "-" in head["ETag"], "the model blob should have been uploaded in parts"
    # Other bytes of the same size, uploaded in parts like the tool does, metadata copied.
    forged = tmp_path / "forged"
    forged.write_bytes(os.urandom(int(blob["size"])))
    client.upload_file(str(forged), bucket, key,
                       ExtraArgs={"Metadata": head["Metadata"], "ChecksumAlgorithm": "SHA256"},
                       Config=boto3.s3.transfer.TransferConfig(
                           multipart_threshold=MULTIPART_THRESHOLD, multipart_chunksize=8 * 2**20))
    assert client.head_object(Bucket=bucket, Key=key)["ContentLength"] == blob["size"]

    result = cli(["promote", "production", "--release", release], project,
                 env=s3_server.env)
    verdict = exit_verdict(result, 3)
    pointer_key = "releases/environments/fraud-mlp/production.json"
    if client.list_objects_v2(Bucket=bucket, Prefix=pointer_key).get("KeyCount", 0):
        verdict = GateVerdict("not_refused", verdict.why + "; the production pointer moved")
    judged(matrix, "tampered_blob_multipart", verdict)
