"""`materialize`: a release written as its server loads it, every byte from a checked blob,
into place whole or not at all; bad input is one line naming what and where."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest

from pipeline.cli.app import main
from pipeline.errors import StoreError, UsageError
from pipeline.release.materialize import materialize
from pipeline.release.resolve import resolve_release
from pipeline.release.store.local import LocalStore
from tests.support.example_releases import ExampleRelease, publish_example

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def triton(project: Path, tmp_path: Path) -> ExampleRelease:
    return publish_example(project / "serve.yaml", project / ".serve-pipeline" / "store",
                           tmp_path / "build-triton")


@pytest.fixture
def torchserve(project: Path, tmp_path: Path) -> ExampleRelease:
    folder = project / "examples" / "torchserve"
    return publish_example(folder / "serve.yaml", folder / ".serve-pipeline" / "store",
                           tmp_path / "build-torchserve")


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(argv)
        raise SystemExit(0)
    shown = capsys.readouterr()
    return int(exited.value.code or 0), shown.out, shown.err


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_a_triton_release_is_its_model_repository(triton: ExampleRelease,
                                                  project: Path) -> None:
    done = materialize(triton.store, triton.manifest, "repository", project)
    root = project / "repository"
    assert done.written == len(done.files) == 4
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) == [
        "fraud-mlp/1/model.pt", "fraud-mlp/1/model.py", "fraud-mlp/1/model_runtime.py",
        "fraud-mlp/config.pbtxt"]
    assert (root / "fraud-mlp" / "config.pbtxt").read_bytes() == \
        triton.blob_path("config.pbtxt").read_bytes()
    assert (root / "fraud-mlp" / "1" / "model.pt").read_bytes() == \
        triton.blob_path("model").read_bytes()
    with tarfile.open(triton.blob_path("triton-model-repository")) as published:
        for member in published.getmembers():
            if member.isfile():
                extracted = published.extractfile(member)
                assert extracted is not None
                assert (root / member.name).read_bytes() == extracted.read()


def test_a_torchserve_release_is_kserves_model_store_and_config(torchserve: ExampleRelease,
                                                                tmp_path: Path) -> None:
    done = materialize(torchserve.store, torchserve.manifest, str(tmp_path / "out"), tmp_path)
    root = tmp_path / "out"
    assert done.files == ("config/config.properties", "model-store/fraud-mlp-torchserve.mar")
    assert (root / "model-store" / "fraud-mlp-torchserve.mar").read_bytes() == \
        torchserve.blob_path("torchserve-mar").read_bytes()
    assert (root / "config" / "config.properties").read_bytes() == \
        torchserve.blob_path("config.properties").read_bytes()


def test_an_environment_names_its_live_release(triton: ExampleRelease) -> None:
    assert resolve_release(triton.store, "fraud-mlp", "production") == triton.manifest
    assert resolve_release(triton.store, "fraud-mlp", triton.release_id) == triton.manifest
    with pytest.raises(UsageError, match=r"^environment staging of 'fraud-mlp' has no live "
                                         r"release in file://"):
        resolve_release(triton.store, "fraud-mlp", "staging")
    with pytest.raises(UsageError, match=r"^no release 20260101T000000Z-00000000 of "
                                         r"'fraud-mlp' in file://"):
        resolve_release(triton.store, "fraud-mlp", "20260101T000000Z-00000000")


def test_a_destination_holding_the_release_is_kept_and_any_other_refused(
        triton: ExampleRelease, tmp_path: Path) -> None:
    deploy = tmp_path / "deploy"
    target = deploy / "repository"
    materialize(triton.store, triton.manifest, str(target), tmp_path)
    again = materialize(triton.store, triton.manifest, str(target), tmp_path)
    assert again.written == 0 and len(again.files) == 4
    (target / "fraud-mlp" / "1" / "model.py").write_text("# edited\n")
    with pytest.raises(UsageError, match="is not empty and does not hold release"):
        materialize(triton.store, triton.manifest, str(target), tmp_path)
    other = deploy / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match=f"^{other} is not empty"):
        materialize(triton.store, triton.manifest, str(other), tmp_path)
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    empty = deploy / "empty"
    empty.mkdir()
    assert materialize(triton.store, triton.manifest, str(empty), tmp_path).written == 4
    assert sorted(p.name for p in deploy.iterdir()) == ["empty", "other", "repository"]


@pytest.mark.parametrize("role", ["triton-model-repository", "config.pbtxt"])
def test_a_blob_failing_its_check_leaves_nothing(triton: ExampleRelease, tmp_path: Path,
                                                 role: str) -> None:
    blob = triton.blob_path(role)
    data = blob.read_bytes()
    blob.write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    with pytest.raises(StoreError, match=rf"^release {triton.release_id} .*: store file://"
                                         r".* does not match its digest"):
        materialize(triton.store, triton.manifest, str(deploy / "out"), tmp_path)
    assert list(deploy.iterdir()) == []


def test_the_command_writes_the_live_release(triton: ExampleRelease, project: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["materialize", "production", "--to", "served"], capsys)
    assert code == 0
    assert f"release {triton.release_id} (triton)" in out and "4 of 4 files written" in out
    assert (project / "served" / "fraud-mlp" / "config.pbtxt").is_file()
    code, out, _ = run(["materialize", triton.release_id, "--to", "served"], capsys)
    assert code == 0 and "already there (4 files)" in out


@pytest.mark.parametrize(("argv", "code", "message"), [
    (["materialize", "staging", "--to", "out"], 2,
     "error: environment staging of 'fraud-mlp' has no live release in file://"),
    (["materialize", "20260101T000000Z-00000000", "--to", "out"], 2,
     "error: no release 20260101T000000Z-00000000 of 'fraud-mlp' in file://"),
    (["materialize", "production", "--to", "out", "--store", "file://serve.yaml/store"], 3,
     "error: store file://serve.yaml/store: /"),
])
def test_bad_input_is_one_line_and_an_exit_code(triton: ExampleRelease, project: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                argv: list[str], code: int,
                                                message: str) -> None:
    exit_code, _, err = run(argv, capsys)
    assert exit_code == code
    assert one_error_line(err).startswith(message)
    assert not (project / "out").exists()


def test_a_corrupt_blob_on_the_command_line(triton: ExampleRelease, project: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    blob = triton.blob_path("triton-model-repository")
    blob.write_bytes(b"x" * blob.stat().st_size)
    exit_code, _, err = run(["materialize", "production", "--to", "out"], capsys)
    assert exit_code == 3
    line = one_error_line(err)
    assert f"release {triton.release_id} artifact" in line and "does not match" in line
    assert not (project / "out").exists()


def test_a_release_of_an_older_store_is_refused_in_one_line(tmp_path: Path) -> None:
    """The fixture store of earlier versions (tests/unit/data/release_store): its releases
    name a model blob as their artifact, which is no model repository."""
    root = tmp_path / "store"
    shutil.copytree(DATA / "release_store", root)
    store = LocalStore(root, f"file://{root}")
    manifest = resolve_release(store, "fraud-mlp", "staging")
    with pytest.raises(StoreError, match=rf"^release {manifest.release_id} in file://.*: the "
                                         "release's model repository cannot be unpacked: "):
        materialize(store, manifest, str(tmp_path / "out"), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]
