"""The GPU runner path up to the GPU: the overlay's config and the carried folder's
manifest (trimming and install need processes: tests/integration/test_gpu_carry.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks import gpu_carry
from pipeline.servers.specs import load_spec
from pipeline.servers.triton.config import config_text, render_model_config

REPO = Path(__file__).resolve().parents[2]
GPU_SPEC = REPO / "examples" / "gpu" / "serve.yaml"


@pytest.mark.parametrize(("environment", "kind"), [("gpu", "KIND_GPU"), ("cpu", "KIND_CPU")])
def test_the_overlay_picks_the_instance_kind(environment: str, kind: str) -> None:
    spec = load_spec(GPU_SPEC, environment).spec
    text = config_text(render_model_config(spec, "model.pt", None))
    assert f"kind: {kind}" in text
    assert "count: 2" in text


def _folder_with_manifest(tmp_path: Path) -> Path:
    folder = tmp_path / "carry"
    folder.mkdir()
    wheel = folder / "tiny-1.0-py3-none-any.whl"
    wheel.write_bytes(b"x" * 2048)
    manifest = {"files": [{"file": wheel.name, "bytes": 2048,
                           "sha256": gpu_carry.sha256_file(wheel)}]}
    (folder / gpu_carry.MANIFEST).write_text(json.dumps(manifest))
    return folder


def test_check_accepts_an_intact_folder_and_lists_it(tmp_path: Path) -> None:
    folder = _folder_with_manifest(tmp_path)
    assert gpu_carry.check(folder) == []
    assert "tiny-1.0-py3-none-any.whl" in gpu_carry.listing(folder)


def test_check_fails_over_the_limit(tmp_path: Path) -> None:
    folder = _folder_with_manifest(tmp_path)
    problems = gpu_carry.check(folder, limit=1024)
    assert any("over the" in p for p in problems)


def test_check_fails_on_a_changed_missing_or_unlisted_file(tmp_path: Path) -> None:
    folder = _folder_with_manifest(tmp_path)
    (folder / "tiny-1.0-py3-none-any.whl").write_bytes(b"y" * 2048)
    (folder / "stray.whl").write_bytes(b"")
    problems = gpu_carry.check(folder)
    assert any("does not match its sha256" in p for p in problems)
    assert any("stray.whl is not in" in p for p in problems)
    shutil.rmtree(folder)
    assert "is missing" in gpu_carry.check(folder)[0]


def test_the_cli_check_exits_1_on_problems(tmp_path: Path) -> None:
    assert gpu_carry.main(["--check", "--dest", str(tmp_path / "nothing")]) == 1
