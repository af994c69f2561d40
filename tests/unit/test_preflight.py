"""Preflight's verdicts without processes: exit kinds, scopes, and the checks that read only
this machine's files."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import PipelineFailed
from pipeline.preflight import Check, PreflightFailed, Scope, most_serious, run_checks
from pipeline.servers.specs import load_spec

REPO = Path(__file__).resolve().parents[2]


def test_the_most_serious_kind_wins() -> None:
    store = Check.failed("store", "bucket missing", 3)
    port = Check.failed("ports", "busy")
    policy = Check.failed("store.release", "no release", 5)
    assert most_serious([Check.ok("disk", "fine")]) == 0
    assert most_serious([policy, store]) == 3
    assert most_serious([policy, store, port]) == 2
    error = PreflightFailed([Check.ok("disk", "fine"), store, port])
    assert error.exit_code == 2
    assert error.lines() == ["preflight: store: bucket missing", "preflight: ports: busy"]


def test_a_stage_failed_on_the_store_exits_3_else_1() -> None:
    assert PipelineFailed("run x failed at publish: store ...", 3).exit_code == 3
    assert PipelineFailed("lost the race", 4).exit_code == 4
    assert PipelineFailed("a gate failed", 1).exit_code == 1
    assert PipelineFailed("a usage error inside a stage", 2).exit_code == 1


def test_scopes() -> None:
    loaded = load_spec(REPO / "serve.yaml.example", "staging")
    everything = frozenset({"build", "start", "readiness", "parity", "latency", "saturation",
                            "publish"})
    run = Scope.for_run(loaded, "staging", False, everything)
    assert run.starts_server and run.reads_source and run.publishes
    attached = Scope.for_run(loaded, None, True, frozenset({"readiness", "latency"}))
    assert not (attached.starts_server or attached.reads_source or attached.publishes)
    production = load_spec(REPO / "serve.yaml.example", "production")
    promotion = Scope.for_promotion(production, "production")
    assert promotion.needs_release and not promotion.reads_source


def test_what_a_measured_server_needs_is_checked_alone() -> None:
    loaded = load_spec(REPO / "serve.yaml.example")
    scope = Scope.for_run(loaded, None, True, frozenset({"readiness", "parity"}))
    checks = run_checks(loaded, {}, scope)
    assert {c.name: c.status for c in checks} == {
        "store": "skipped", "server": "skipped", "model.source": "ok", "disk": "skipped"}


def test_doctor_for_production_runs_the_promotion_policy_read_only(project: Path) -> None:
    """Where `promote production` would exit 5 (no approval) or 3 (a blob replaced), the
    checks say so, each refusal on its own line with promote's own message; nothing is
    written."""
    from typer.testing import CliRunner

    from pipeline.cli.app import app
    from pipeline.digest import sha256_bytes
    from pipeline.errors import PolicyError
    from pipeline.release.policy import decide_promotion
    from tests.support.policy import policy_store, sign_approval, staged

    store = policy_store(project)
    release = staged(store, b"model-1")
    production = load_spec(project / "serve.yaml", "production")
    scope = Scope.for_promotion(production, "production")
    before = sorted(store.list(""))
    checks = {c.name: c for c in run_checks(production, {}, scope)}
    assert checks["policy.requires"].status == "ok"
    assert checks["policy.approval"].status == "failed"
    assert checks["policy.approval"].exit_kind == 5
    assert most_serious(checks.values()) == 5
    with pytest.raises(PolicyError) as refused:
        decide_promotion(store, production, "production", None)
    assert checks["policy.approval"].detail == str(refused.value)

    (store.root / "blobs" / "sha256" / sha256_bytes(b"model-1")).write_bytes(b"MODEL-1")
    shown = CliRunner().invoke(app, ["doctor", "--env", "production"], terminal_width=400)
    assert shown.exit_code == 3, shown.output
    problems = [line for line in shown.output.splitlines() if line.startswith("✗ ")]
    assert [line.split(":")[0] for line in problems] == ["✗ policy.blobs", "✗ policy.approval"]
    assert "is corrupt" in problems[0] and "needs a signed approval" in problems[1]
    assert sorted(store.list("")) == before

    (store.root / "blobs" / "sha256" / sha256_bytes(b"model-1")).write_bytes(b"model-1")
    sign_approval(store, project, release)
    checks = {c.name: c for c in run_checks(production, {}, scope)}
    assert {name: c.status for name, c in checks.items() if name.startswith("policy.")} == {
        f"policy.{step}": "ok" for step in ("spec", "target", "blobs", "requires", "gates",
                                            "approval")}
    assert checks["policy.approval"].detail == "approved by rita"


def test_a_busy_port_names_its_process_and_the_line_that_sets_it(project: Path) -> None:
    """A real socket of this test process holds the port the staging overlay asks for."""
    import os
    import socket

    import psutil

    from pipeline.preflight.ports import port_checks

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        overlay = project / "environments" / "staging.yaml"
        lines = [line for line in overlay.read_text().splitlines() if line != "{}"]
        overlay.write_text("\n".join([*lines, f"server: {{ports: {{http: {port}}}}}", ""]))
        loaded = load_spec(project / "serve.yaml", "staging")
        checks = port_checks(loaded)
    assert [check.status for check in checks] == ["failed"]
    assert checks[0].line() == (
        f"ports: environments/staging.yaml:{len(lines) + 1}: server.ports.http: port {port} on "
        f"127.0.0.1 is already in use by process {os.getpid()} ({psutil.Process().name()}): "
        "stop it, or set another port there")
    assert port_checks(load_spec(project / "serve.yaml", "staging"))[0].status == "ok"


def test_a_model_source_that_is_not_a_model_fails_preflight(project: Path) -> None:
    """`doctor` and every run refuse a source that is not of the declared format."""
    from pipeline.preflight.dvc import dvc_checks

    loaded = load_spec(project / "serve.yaml")
    model = loaded.resolve(str(loaded.spec.model.source.path))
    model.write_text("weights: see the team drive\n")
    [check] = dvc_checks(loaded)
    assert check.status == "failed"
    assert check.line().startswith(f"model.source: {model}: not a TorchScript "
                                   "file: torch.jit.save writes a zip archive, and it is text")
