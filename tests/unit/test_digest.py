"""What an artifact serves, apart from when it was built."""

from __future__ import annotations

import json
import tarfile
import zipfile
from pathlib import Path

from pipeline.digest import content_digest, deterministic_tar


def mar(path: Path, files: dict[str, bytes], built_at: str) -> Path:
    with zipfile.ZipFile(path, "w") as bundle:
        bundle.writestr("MAR-INF/MANIFEST.json", json.dumps({"createdOn": built_at}))
        for name, data in files.items():
            bundle.writestr(name, data)
    return path


def test_two_builds_of_the_same_mar_serve_the_same_files(tmp_path: Path) -> None:
    files = {"weights.pt": b"w", "entrypoint.py": b"def build(): ..."}
    first = mar(tmp_path / "a.mar", files, "01/12/2026 10:00:00")
    second = mar(tmp_path / "b.mar", files, "07/12/2026 20:00:00")
    assert first.read_bytes() != second.read_bytes()
    assert content_digest(first) == content_digest(second) is not None


def test_a_changed_entrypoint_with_the_same_weights_is_another_artifact(tmp_path: Path) -> None:
    before = mar(tmp_path / "a.mar", {"weights.pt": b"w", "entrypoint.py": b"fast"}, "t")
    after = mar(tmp_path / "b.mar", {"weights.pt": b"w", "entrypoint.py": b"slow"}, "t")
    assert content_digest(before) != content_digest(after)


def test_a_model_repository_tar_is_read_by_its_files(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "m" / "1").mkdir(parents=True)
    (root / "m" / "1" / "model.py").write_text("serve")
    deterministic_tar(root, tmp_path / "a.tar")
    with tarfile.open(tmp_path / "b.tar", "w") as bundle:   # other times and owners
        bundle.add(root / "m", arcname="m")
    assert content_digest(tmp_path / "a.tar") == content_digest(tmp_path / "b.tar")


def test_a_file_that_is_no_archive_has_no_content_digest(tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(b"not an archive")
    assert content_digest(tmp_path / "x") is None
    assert content_digest(tmp_path / "missing") is None
