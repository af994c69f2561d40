"""The serving layout published beside a release: the files `materialize` writes, under the
release id, listed in the manifest and attested, never overwritten, and checked before a
pointer moves onto the release."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.cli.app import main
from pipeline.errors import StoreError
from pipeline.release.manifest import manifest_key, verify_release
from pipeline.release.materialize import materialize
from pipeline.release.serving_layout import file_digests, layout_files, layout_prefix
from pipeline.release.signing.attestation import mismatches, parse_statement, subject_digests
from pipeline.release.signing.dsse import Envelope
from pipeline.release.verify import verify_store
from tests.support.example_releases import ExampleRelease, publish_example


@pytest.fixture(params=["triton", "torchserve"])
def release(request: pytest.FixtureRequest, project: Path, tmp_path: Path) -> ExampleRelease:
    folder = project if request.param == "triton" else project / "examples" / "torchserve"
    return publish_example(folder / "serve.yaml", folder / ".serve-pipeline" / "store",
                           tmp_path / "build", serving_layout=True)


def published_layout(release: ExampleRelease) -> Path:
    return release.store.root / layout_prefix(release.loaded.spec.name, release.release_id)


def statement_of(release: ExampleRelease) -> dict[str, object]:
    digest = release.manifest.attestation_digest
    assert digest is not None
    envelope = Envelope.from_bytes(release.store.read_blob(digest))
    return parse_statement(envelope, "https://serve-pipeline.dev/attestation/release/v1")


def test_the_layout_is_what_materialize_writes_listed_and_attested(
        release: ExampleRelease, tmp_path: Path) -> None:
    beside = published_layout(release)
    materialized = materialize(release.store, release.manifest, str(tmp_path / "out"),
                               tmp_path)
    assert file_digests(beside) == file_digests(tmp_path / "out") == \
        layout_files(release.manifest)
    assert len(materialized.files) >= 2
    attested = subject_digests(statement_of(release))
    name = release.loaded.spec.name
    for path, digest in layout_files(release.manifest).items():
        assert attested[f"{name}/serving/{path}"] == digest
    assert mismatches(release.manifest, statement_of(release)) == []
    assert verify_release(release.store, release.manifest) == []


def test_a_manifest_rewritten_to_list_other_layout_bytes_disagrees_with_its_attestation(
        release: ExampleRelease) -> None:
    files = layout_files(release.manifest)
    path = sorted(files)[0]
    forged = replace(release.manifest,
                     serving_layout={"files": {**files, path: "0" * 64}})
    assert mismatches(forged, statement_of(release)) == [
        f"{release.loaded.spec.name}/serving/{path}: manifest says 000000000000, "
        f"attestation {files[path][:12]}"]
    dropped = replace(release.manifest, serving_layout=None)
    assert all(problem.endswith("attested but not in the manifest")
               for problem in mismatches(dropped, statement_of(release)))
    assert len(mismatches(dropped, statement_of(release))) == len(files)


def test_an_edited_or_missing_layout_file_fails_the_check_before_a_pointer_moves(
        release: ExampleRelease) -> None:
    beside = published_layout(release)
    first, second = sorted(layout_files(release.manifest))[:2]
    (beside / first).write_bytes(b"edited after publish")
    (beside / second).unlink()
    prefix = layout_prefix(release.loaded.spec.name, release.release_id)
    edited = hashlib.sha256(b"edited after publish").hexdigest()
    assert verify_release(release.store, release.manifest) == [
        f"serving layout: {prefix}/{first} is corrupt (sha256 {edited[:12]})",
        f"serving layout: {prefix}/{second} is missing"]
    found = verify_store(release.store).problems
    assert [p for p in found if "serving layout" in p] == [
        f"release {release.loaded.spec.name}/{release.release_id} {problem}"
        for problem in verify_release(release.store, release.manifest)]


def test_the_layout_is_never_overwritten(release: ExampleRelease) -> None:
    key = f"{layout_prefix(release.loaded.spec.name, release.release_id)}/" \
          f"{sorted(layout_files(release.manifest))[0]}"
    with pytest.raises(StoreError):
        release.store.create(key, b"another release's bytes")


def test_a_release_whose_layout_was_edited_is_not_promoted(
        project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    release = publish_example(project / "serve.yaml", project / ".serve-pipeline" / "store",
                              tmp_path / "build", environment="staging",
                              serving_layout=True)
    beside = published_layout(release)
    config = beside / "fraud-mlp" / "config.pbtxt"
    config.write_text(config.read_text() + "\n# edited\n")
    with pytest.raises(SystemExit) as exited:
        main(["promote", "production", "--release", release.release_id])
    assert exited.value.code not in (0, None)
    shown = capsys.readouterr().err
    [line] = shown.strip().splitlines()
    assert line.startswith("error: ") and "serving layout: serving/fraud-mlp/" in line and \
        "/fraud-mlp/config.pbtxt is corrupt (sha256 " in line, shown
    pointer = release.store.read("environments/fraud-mlp/production.json")
    assert pointer is None or release.release_id not in json.loads(pointer).get("current", "")
    assert release.store.read(manifest_key("fraud-mlp", release.release_id)) is not None

