"""Fixed ports the spec asks for must be free on 127.0.0.1 (the others are picked free)."""

from __future__ import annotations

from pipeline.preflight.checks import Check
from pipeline.servers.ports import busy_port_message, port_is_bound
from pipeline.spec.models import LoadedSpec


def port_checks(loaded: LoadedSpec) -> list[Check]:
    wanted = loaded.spec.server.ports
    if not wanted:
        return [Check.skipped("ports", "no fixed ports: free ones are picked at start")]
    busy = [Check.failed("ports", busy_port_message(loaded, name, port))
            for name, port in sorted(wanted.items()) if port_is_bound(port)]
    if busy:
        return busy
    shown = ", ".join(f"{name} {port}" for name, port in sorted(wanted.items()))
    return [Check.ok("ports", f"{shown} free on 127.0.0.1")]
