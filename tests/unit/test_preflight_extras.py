"""A spec that needs an optional part which is not installed: preflight says which pip
command installs it, in one line, and skips the checks that would import it. Not installed
is simulated by blocking the module (`sys.modules[name] = None`, which makes `import name`
raise ImportError), since the test environment has every extra."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from pipeline.preflight import PreflightFailed, Scope, require_ready, run_checks
from pipeline.preflight.extras import EXTRAS, missing_extras
from pipeline.servers.kinds import KINDS
from pipeline.servers.specs import load_spec

REPO = Path(__file__).resolve().parents[2]
EVERYTHING = frozenset({"build", "start", "readiness", "parity", "latency", "saturation",
                        "publish"})


def test_torchserve_missing_is_one_line_naming_the_pip_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ts", None)
    loaded = load_spec(REPO / "examples" / "torchserve" / "serve.yaml", "staging")
    scope = Scope.for_run(loaded, "staging", False, EVERYTHING)
    with pytest.raises(PreflightFailed) as failed:
        require_ready(loaded, {}, scope)
    assert failed.value.exit_code == 2
    assert failed.value.lines()[0] == ("preflight: extras: TorchServe (server.kind: torchserve) "
                                       "needs: pip install 'serve-pipeline[torchserve]'")
    names = [check.name for check in run_checks(loaded, {}, scope)]
    assert "server.binary" not in names, "the TorchServe checks would import it"


def test_an_s3_store_without_boto3_names_the_s3_extra(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    spec = (REPO / "serve.yaml.example").read_text().replace(
        "store: file://.serve-pipeline/store", "store: s3://bucket/prefix")
    (tmp_path / "serve.yaml").write_text(spec)
    shutil.copytree(REPO / "examples" / "mlp", tmp_path / "examples" / "mlp")
    monkeypatch.setitem(sys.modules, "boto3", None)
    loaded = load_spec(tmp_path / "serve.yaml")
    checks = run_checks(loaded, {}, Scope.for_run(loaded, "staging", False, EVERYTHING))
    failed = [check.line() for check in checks if check.status == "failed"]
    assert "extras: An S3 release store (publish.store: s3://...) needs: pip install " \
           "'serve-pipeline[s3]'" in failed
    assert "store" not in [check.name for check in checks]


def test_nothing_is_missing_when_everything_is_installed() -> None:
    loaded = load_spec(REPO / "examples" / "torchserve" / "serve.yaml", "staging")
    assert missing_extras(loaded, Scope.for_run(loaded, "staging", False, EVERYTHING)) == []


def test_the_extras_are_the_ones_pyproject_declares() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib comes with Python 3.11")
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert {extra.extra for extra in EXTRAS} <= set(declared)
    assert {kind.optional_part.extra for kind in KINDS.values()
            if kind.optional_part is not None} <= set(declared)
    parts = {requirement for name, requirements in declared.items()
             if name not in ("all", "test") for requirement in requirements}
    assert set(declared["all"]) == parts, "all lists every other extra's requirements, flat"
    assert not any(r.startswith("serve-pipeline") for r in declared["all"] + declared["test"])


def test_doctor_shows_the_pip_command_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """`[torchserve]` is text in the doctor table, not a style tag Rich would swallow."""
    from typer.testing import CliRunner

    from pipeline.cli.app import app

    monkeypatch.setitem(sys.modules, "ts", None)
    monkeypatch.setenv("COLUMNS", "200")
    result = CliRunner().invoke(app, ["doctor", "-f",
                                      str(REPO / "examples" / "torchserve" / "serve.yaml")])
    assert result.exit_code == 2
    assert "pip install 'serve-pipeline[torchserve]'" in result.output

