"""start: launch tritonserver with exactly the built repository, on loopback ports."""

from __future__ import annotations

import shutil
import time

from pipeline.context import RunContext
from pipeline.errors import ServerError
from pipeline.ports import free_ports, port_is_bound
from pipeline.results import StageResult, Status
from pipeline.servers.triton import TritonInstallation, TritonPorts, TritonServer

NAME = "start"
USES_SERVER = True
EARLY_EXIT_WATCH_S = 0.5


def run(ctx: RunContext) -> StageResult:
    spec = ctx.loaded.spec
    build = ctx.require_build()
    wanted = spec.server.ports
    for name, port in wanted.items():
        if port_is_bound(port):
            raise ServerError(f"server.ports.{name}: port {port} on 127.0.0.1 is already in use")
    spare = iter(free_ports(3))
    ports = TritonPorts(**{name: wanted.get(name) or next(spare)
                           for name in ("http", "grpc", "metrics")})
    # Triton's python stubs write __pycache__ next to model.py: serve a copy, never
    # the digested build output.
    serving = ctx.run_dir / "serving-repository"
    shutil.copytree(build.repository.root, serving)
    server = TritonServer(TritonInstallation.find(), serving, spec.name, ports, ctx.run_dir,
                          ctx.env)
    ctx.resources.callback(server.stop)
    server.start()
    ctx.server = server
    deadline = time.monotonic() + EARLY_EXIT_WATCH_S
    while time.monotonic() < deadline:
        if not server.process.is_running():
            raise ServerError(f"tritonserver exited at start: {server.describe_death()}")
        time.sleep(0.05)
    return StageResult(
        NAME, Status.PASSED,
        f"tritonserver pid {server.process.pid} on 127.0.0.1 http:{ports.http} "
        f"grpc:{ports.grpc} metrics:{ports.metrics}",
        details={"pid": server.process.pid, "ports": vars(ports),
                 "log": str(server.process.log_path)},
    )
