"""CI runs .ci/run (install, .ci/lint, the README's test command), and the deploy template
promotes the staging release to production without rebuilding it. actionlint itself runs
in .ci/lint, not here: the unit suite starts no process."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"
ACTIONLINT_CONFIG = REPO / ".github" / "actionlint.yaml"
RELEASE_OUTPUT = "${{ needs.staging.outputs.release_id }}"
README_TEST_COMMAND = ("python3 -m venv .venv && .venv/bin/pip install -q --upgrade pip && "
                       ".venv/bin/pip install torch==2.13.0 -e '.[all,test]' && "
                       ".venv/bin/python -m pytest")


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
    for command in ("python -m pytest", "pip install torch==2.13.0 -e '.[all,test]'", "chromium",
                    ".ci/docker-up", ".ci/lint"):
        assert command in ci_run, f".ci/run does not run {command!r}"
    commands = [line.strip() for line in ci_run.splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    lint = commands.index(".ci/lint")
    install = next(i for i, line in enumerate(commands) if "-e '.[all,test]'" in line)
    tests = next(i for i, line in enumerate(commands) if "python -m pytest" in line)
    assert install < lint < tests, ".ci/run: install, then .ci/lint, then the tests"
    assert commands[tests] == README_TEST_COMMAND, "the last step is the README's command"


def test_lint_runs_ruff_mypy_and_actionlint_on_both_workflows() -> None:
    """The lint step CI runs before the tests (the suite itself starts no linter)."""
    lint = (REPO / ".ci" / "lint").read_text(encoding="utf-8")
    assert lint.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in lint
    for command in (".venv/bin/python -m ruff check .",
                    ".venv/bin/python -m mypy pipeline stages benchmarks tests",
                    "actionlint -no-color -config-file .github/actionlint.yaml",
                    ".github/workflows/ci.yml .github/workflows/deploy.yml"):
        assert command in " ".join(lint.replace("\\\n", " ").split()), (
            f".ci/lint does not run {command!r}")
    assert os.access(REPO / ".ci" / "lint", os.X_OK), ".ci/lint is not executable"


def test_readme_test_command_is_the_one_ci_runs() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert README_TEST_COMMAND in readme


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
    assert "--approved-by" not in script, "a typed name is not an approval"
    for name in ("staging", "production"):
        permissions = job(load("deploy.yml"), name).get("permissions", {})
        assert permissions.get("id-token") == "write", (
            f"{name} needs id-token: write for a verified identity (the Actions OIDC token)")
    match = re.search(r"--release[ =](\S+)", script)
    assert match, "`promote production` must pass --release"
    value = match.group(1).strip("\"'")
    variable = re.fullmatch(r"\$\{?(\w+)\}?", value)
    if variable:  # "$RELEASE_ID", set in the job's or the step's env
        value = str(env.get(variable.group(1), ""))
    assert value == RELEASE_OUTPUT, (
        f"--release must be the staging job's release_id output, got {value!r}")
