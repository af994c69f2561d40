"""A model tracked by DVC in a git repository, with an S3 remote, promoted from a given rev."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.support.cli import cli
from tests.support.moto_s3 import S3Server

pytestmark = pytest.mark.integration
DVC = str(Path(sys.executable).parent / "dvc")


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
    return done.stdout.strip()


def scripted_mlp(seed: int, path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "mlp"))
    from net import FraudMLP  # type: ignore[import-not-found]  # examples/mlp, on sys.path above

    torch.manual_seed(seed)
    torch.jit.save(torch.jit.script(FraudMLP().eval()), str(path))


def test_promote_a_dvc_tracked_model_at_a_rev(fast_project: Path, s3_server: S3Server,
                                              tmp_path: Path) -> None:
    env = {**s3_server.env, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    bucket = s3_server.new_bucket()
    repo = tmp_path / "model-repo"
    repo.mkdir()
    run(["git", "init", "-q"], repo, env)
    run([DVC, "init", "-q"], repo, env)
    run([DVC, "remote", "add", "-d", "store", f"s3://{bucket}/dvc"], repo, env)
    run([DVC, "remote", "modify", "store", "endpointurl", s3_server.endpoint], repo, env)
    digests = {}
    for tag, seed in (("v1", 1), ("v2", 2)):
        scripted_mlp(seed, repo / "model.pt")
        digests[tag] = hashlib.sha256((repo / "model.pt").read_bytes()).hexdigest()
        run([DVC, "add", "-q", "model.pt"], repo, env)
        run(["git", "add", "-A"], repo, env)
        run(["git", "commit", "-qm", f"model {tag}"], repo, env)
        run(["git", "tag", tag], repo, env)
        run([DVC, "push", "-q"], repo, env)
    v1_commit = run(["git", "rev-parse", "v1^{commit}"], repo, env)
    md5_v1 = yaml.safe_load(run(["git", "show", "v1:model.pt.dvc"], repo, env))["outs"][0]["md5"]
    assert digests["v1"] != digests["v2"]
    # Nothing local to fall back on: v1 must come from the S3 remote.
    shutil.rmtree(repo / ".dvc" / "cache")

    spec = fast_project / "serve.yaml"
    spec.write_text(spec.read_text()
                    .replace("source: examples/mlp/model.pt",
                             f"source: {{dvc: {{path: model.pt, repo: {repo}, rev: v1}}}}")
                    .replace("saturation: {max_concurrency: 4",
                             "saturation: {enabled: false, max_concurrency: 4"))
    result = cli(["run"], fast_project, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    [manifest_path] = (fast_project / ".serve-pipeline" / "store" / "releases").rglob("*.json")
    model = json.loads(manifest_path.read_text())["model"]
    assert model["sha256"] == digests["v1"]
    assert model["provenance"] == {"kind": "dvc", "path": "model.pt", "repo": str(repo),
                                   "rev": "v1", "commit": v1_commit, "dvc_md5": md5_v1,
                                   "size": (tmp_path / "model-repo" / "model.pt").stat().st_size}
    assert model["source"] == f"dvc:{repo}:model.pt@v1"


def test_a_missing_rev_is_one_clear_line(fast_project: Path, tmp_path: Path) -> None:
    repo = tmp_path / "empty-repo"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x.invalid", **dict(__import__("os").environ)}
    run(["git", "init", "-q"], repo, env)
    run([DVC, "init", "-q"], repo, env)
    run(["git", "commit", "-qm", "init"], repo, env)
    spec = fast_project / "serve.yaml"
    spec.write_text(spec.read_text().replace(
        "source: examples/mlp/model.pt",
        f"source: {{dvc: {{path: model.pt, repo: {repo}, rev: no-such-tag}}}}"))
    result = cli(["run"], fast_project)
    assert result.returncode == 2   # found by preflight, before anything is built
    assert "Traceback" not in result.stderr
    assert "model.source.dvc: cannot resolve model.pt@no-such-tag" in result.stderr
