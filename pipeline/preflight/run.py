"""Run every check a command needs, all of them, and report every problem at once."""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.preflight.checks import Check, PreflightFailed
from pipeline.preflight.disk import disk_checks
from pipeline.preflight.docker import docker_checks
from pipeline.preflight.dvc import dvc_checks
from pipeline.preflight.extras import extra_checks, missing_extras, server_extra
from pipeline.preflight.gpu import gpu_checks
from pipeline.preflight.load_workers import load_worker_checks
from pipeline.preflight.ports import port_checks
from pipeline.preflight.scope import Scope
from pipeline.preflight.servers import server_checks
from pipeline.preflight.store import store_checks
from pipeline.spec.models import LoadedSpec


def run_checks(loaded: LoadedSpec, env: Mapping[str, str], scope: Scope) -> list[Check]:
    """Every check, in a fixed order; those that do not apply are `skipped` with why.
    Reads only: no server is started and nothing is written. A check whose optional part
    is not installed is left out: the missing extra is the problem reported."""
    absent = missing_extras(loaded, scope)
    missing = {extra.extra for extra in absent}
    checks = extra_checks(absent)
    checks += [] if "s3" in missing else store_checks(loaded, scope)
    if scope.starts_server:
        own = server_extra(loaded)
        checks += [] if own and own.extra in missing else server_checks(loaded, env)
        checks += port_checks(loaded)
        checks += [] if "docker" in missing else docker_checks(loaded, env)
        checks += gpu_checks(loaded)
    else:
        checks.append(Check.skipped("server", "no server is started here"))
    if scope.reads_source and "dvc" not in missing:
        checks += dvc_checks(loaded)
    checks += load_worker_checks(loaded, env)
    checks += disk_checks(loaded, scope)
    return checks


def require_ready(loaded: LoadedSpec, env: Mapping[str, str], scope: Scope) -> list[Check]:
    """The checks, or PreflightFailed (one line per problem; exit code of the most serious
    kind) when any failed. What `tune` and `compare` call before they start anything."""
    checks = run_checks(loaded, env, scope)
    if any(check.status == "failed" for check in checks):
        raise PreflightFailed(checks)
    return checks
