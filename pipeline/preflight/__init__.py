"""Preflight: check in seconds everything a run needs later (store, server binary, ports,
Docker, model source, GPU, disk) and report every problem at once, before anything starts.

`require_ready(loaded, env, scope)` raises PreflightFailed; `run_checks` returns the list
(`serve-pipeline doctor` prints it)."""

from pipeline.preflight.checks import Check, PreflightFailed, most_serious
from pipeline.preflight.run import require_ready, run_checks
from pipeline.preflight.scope import Scope

__all__ = ["Check", "PreflightFailed", "Scope", "most_serious", "require_ready", "run_checks"]
