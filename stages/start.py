"""start: launch the server with exactly the built artifact, on loopback ports."""

from __future__ import annotations

import time

from pipeline.context import RunContext
from pipeline.errors import ServerError
from pipeline.ports import free_ports, port_is_bound
from pipeline.results import StageResult, Status
from pipeline.servers import server_kind

NAME = "start"
USES_SERVER = True
EARLY_EXIT_WATCH_S = 0.5


def run(ctx: RunContext) -> StageResult:
    spec = ctx.loaded.spec
    artifact = ctx.require_build()
    kind = server_kind(spec.server.kind)
    wanted = spec.server.ports
    for name, port in wanted.items():
        if port_is_bound(port):
            raise ServerError(f"server.ports.{name}: port {port} on 127.0.0.1 is already in use")
    spare = iter(free_ports(len(kind.port_names)))
    ports = {name: wanted.get(name) or next(spare) for name in kind.port_names}
    server = kind.launch(ctx.loaded, artifact, ports, ctx.run_dir, ctx.env)
    ctx.resources.callback(server.stop)
    server.start()
    ctx.server = server
    process = server.process
    assert process is not None
    deadline = time.monotonic() + EARLY_EXIT_WATCH_S
    while time.monotonic() < deadline:
        if not server.alive():
            raise ServerError(f"the server exited at start: {server.describe_death()}")
        time.sleep(0.05)
    shown = " ".join(f"{name}:{port}" for name, port in ports.items())
    return StageResult(
        NAME, Status.PASSED, f"{kind.name} pid {process.pid} on 127.0.0.1 {shown}",
        details={"pid": process.pid, "ports": ports, "log": str(process.log_path)},
    )
