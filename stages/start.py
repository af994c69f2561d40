"""start: launch the server with exactly the built artifact, on loopback ports."""

from __future__ import annotations

import time
from typing import Any

from pipeline.context import RunContext
from pipeline.errors import ServerError
from pipeline.servers import server_kind
from pipeline.servers.base import Contained, ModelServer
from pipeline.servers.ports import busy_port_message, loopback_ports, port_is_bound
from pipeline.stage_result import StageResult, Status

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
            raise ServerError(busy_port_message(ctx.loaded, name, port))
    ports = loopback_ports(kind.port_names, wanted)
    server: ModelServer
    if spec.server.runtime == "docker":
        assert ctx.docker is not None and ctx.image is not None
        server = kind.launch_container(ctx.loaded, ctx.docker, ctx.image, ports, ctx.run_dir,
                                       f"serve-pipeline-{spec.name}-{ctx.run_id}")
    else:
        server = kind.launch(ctx.loaded, artifact, ports, ctx.run_dir, ctx.env)
    # `with server:` split over two stages: started here, waited for by readiness, and
    # stopped when the run's resources close (its __exit__, however the run ends).
    ctx.resources.push(server)
    server.start()
    ctx.server = server
    deadline = time.monotonic() + EARLY_EXIT_WATCH_S
    while time.monotonic() < deadline:
        if not server.alive():
            raise ServerError(f"the server exited at start: {server.describe_death()}")
        time.sleep(0.05)
    shown = " ".join(f"{name}:{port}" for name, port in ports.items())
    details: dict[str, Any] = {"ports": ports, "runtime": spec.server.runtime}
    if isinstance(server, Contained):
        where = f"container {server.container_name}"
        details["container"] = server.container_name
    else:
        assert server.process is not None
        where = f"pid {server.process.pid}"
        details.update(pid=server.process.pid, log=str(server.process.log_path))
    return StageResult(NAME, Status.PASSED, f"{kind.name} {where} on 127.0.0.1 {shown}",
                       details=details)
