"""Preflight's verdicts without processes: exit kinds, scopes, and the checks that read only
this machine's files."""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import PipelineFailed
from pipeline.preflight import Check, PreflightFailed, Scope, most_serious, run_checks
from pipeline.spec.loading import load_spec

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
