"""The server a run will start: what its kind needs installed (for Triton the binary and a
shared libpython; for TorchServe its launcher, torch-model-archiver and Java 17+)."""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.preflight.checks import Check
from pipeline.servers import server_kind
from pipeline.spec.models import LoadedSpec


def server_checks(loaded: LoadedSpec, env: Mapping[str, str]) -> list[Check]:
    checks = []
    for part in server_kind(loaded.spec.server.kind).installation_checks(loaded, env):
        if part.passed is None:
            checks.append(Check.skipped(part.name, part.detail))
        elif part.passed:
            checks.append(Check.ok(part.name, part.detail))
        else:
            checks.append(Check.failed(part.name, part.detail))
    return checks
