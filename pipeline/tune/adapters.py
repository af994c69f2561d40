"""Every contact of `tune` with the server, runner and record APIs, in one place.

INTEGRATOR: these are the only functions to adapt when the server lifecycle (context
managers, `serving()`), the typed run record and preflight land:
- `preflight`: replace the body with pipeline.preflight.require_ready(loaded, env,
  Scope(environment=None, starts_server=True, reads_source=True, publishes=False)).
- `ServingSession._launch`: builds and starts one server (Triton with its model-control
  API on, see `_explicit_model_control`).
- `ServingSession._reload`: Triton's repository API load with a config.
- `verify_on`: one candidate through the runner (latency + saturation), attached to our
  server; returns the record as a dict.
- `read_candidate`: what tune reads from a candidate's run record.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as pb

from pipeline import metric_names as m
from pipeline.context import Progress, RunContext, no_progress
from pipeline.errors import ServerError, UsageError
from pipeline.model.source import resolve_model_source
from pipeline.preflight import Scope, require_ready
from pipeline.record import RunRecord
from pipeline.runner import run_pipeline
from pipeline.servers import http, server_kind
from pipeline.servers.base import ModelServer
from pipeline.servers.ports import loopback_ports
from pipeline.spec.models import LoadedSpec
from pipeline.tune.space import Config, apply_config

VERIFIED_STAGES = frozenset({"latency", "saturation"})


TUNE_SCOPE = Scope(environment=None, starts_server=True, reads_source=True, publishes=False)


def preflight(loaded: LoadedSpec, env: Mapping[str, str]) -> None:
    """Refuse early (before any server starts) when the server cannot be run here: the
    pipeline's preflight (binaries, java, ports, model source, disk; no store: tune
    publishes nothing), all problems at once."""
    if loaded.spec.server.runtime != "process":
        raise UsageError("tune runs servers as local processes; server.runtime: docker "
                         "is not tuned in this version")
    require_ready(loaded, env, TUNE_SCOPE)


def measuring_context(loaded: LoadedSpec, run_dir: Path, env: Mapping[str, str],
                      resources: ExitStack, progress: Progress = no_progress) -> RunContext:
    """A RunContext for the measure/ helpers (closed_window, load_target)."""
    return RunContext(loaded=loaded, run_id=run_dir.name, run_dir=run_dir, env=dict(env),
                      resources=resources, progress=progress)


@dataclass
class ServingSession:
    """The server(s) of one tune run: one process reconfigured in place where Triton's
    model-control API allows it, a fresh process per config otherwise. `close` stops
    whatever is running (by PID, through ManagedProcess)."""

    loaded: LoadedSpec
    folder: Path
    env: Mapping[str, str]
    model_control: bool
    server: ModelServer | None = None
    current: Config | None = None
    starts: int = 0
    reloads: int = 0
    _model_file: Path | None = None
    events: list[dict[str, Any]] = field(default_factory=list)

    def serve(self, config: Config) -> ModelServer:
        """A ready server running `config`; ServerError when it cannot be had."""
        if self.current == config and self.server is not None and self.server.alive():
            return self.server
        started = time.monotonic()
        if self.model_control and self.server is not None and self.server.alive():
            self.current = None
            self._reload(self.server, config)
            self.reloads += 1
            how = "reloaded"
        else:
            self.close()
            self.server = self._launch(config)
            self.starts += 1
            how = "started"
        self.current = config
        self.events.append({"config": config.label, "how": how,
                            "seconds": time.monotonic() - started})
        return self.server

    def close(self) -> None:
        server, self.server, self.current = self.server, None, None
        if server is not None:
            server.stop()

    def model_file(self) -> Path:
        if self._model_file is None:
            source = resolve_model_source(self.loaded, self.folder / "model-source")
            self._model_file = source.file
        return self._model_file

    def _launch(self, config: Config) -> ModelServer:
        loaded = config.applied(self.loaded)
        kind = server_kind(loaded.spec.server.kind)
        where = self.folder / f"server-{self.starts + 1}"
        where.mkdir(parents=True)
        artifact = kind.build(loaded, self.model_file(), where)
        server = kind.launch(loaded, artifact, loopback_ports(kind.port_names), where, self.env)
        if self.model_control:
            _explicit_model_control(server, loaded.spec.name)
        try:
            server.start()
            server.wait_ready(loaded.spec.stages.readiness.timeout.seconds)
        except BaseException:
            server.stop()
            raise
        return server

    def _reload(self, server: ModelServer, config: Config) -> None:
        loaded = config.applied(self.loaded)
        scratch = self.folder / "configs" / f"{self.reloads + 1}"
        scratch.mkdir(parents=True)
        artifact = server_kind("triton").build(loaded, self.model_file(), scratch)
        config_json = json_format.MessageToJson(text_format.Parse(artifact.config_text,
                                                                  pb.ModelConfig()))
        from pipeline.servers.triton.server import TritonEndpoint

        assert isinstance(server, TritonEndpoint)
        url = f"{server.base_url}/v2/repository/models/{loaded.spec.name}/load"
        body = json.dumps({"parameters": {"config": config_json}}).encode()
        timeout = loaded.spec.stages.readiness.timeout.seconds
        try:
            reply = http.call("POST", url, body, {"Content-Type": "application/json"},
                              timeout_s=timeout)
        except http.Unreachable as exc:
            raise ServerError(f"reloading {config.label}: {exc}") from None
        if reply.status != 200:
            raise ServerError(f"Triton refused {config.label}: {reply.text()[:300]}")
        server.wait_ready(timeout)
        _wait_for_old_instances(server)


def _wait_for_old_instances(server: ModelServer, quiet_s: float = 1.0,
                            limit_s: float = 15.0) -> None:
    """After a reload the previous config's python-backend stubs take a moment to exit;
    memory is measured on the new config's processes only once the tree stops changing."""
    deadline = time.monotonic() + limit_s
    last, since = len(server.process_tree()), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet_s:
        time.sleep(0.1)
        count = len(server.process_tree())
        if count != last:
            last, since = count, time.monotonic()


def _explicit_model_control(server: ModelServer, model: str) -> None:
    """Start Triton with its repository API on, loading the model at start, so that a new
    config is a reload (a few seconds) rather than a restart. The production config keeps
    the API off; this server serves only tune's own measurements, on loopback."""
    process = server.process
    assert process is not None
    argv = process.argv
    argv[argv.index("--model-control-mode=none")] = "--model-control-mode=explicit"
    argv.append(f"--load-model={model}")


def verify_on(server: ModelServer, loaded: LoadedSpec, config: Config, run_dir: Path,
              env: Mapping[str, str], progress: Progress = no_progress) -> RunRecord:
    """Measure `config` with the pipeline's own latency and saturation stages (readiness
    comes along), on a server already serving it; the record lands in `run_dir`."""
    spec = apply_config(loaded.spec, config)
    saturation = spec.stages.saturation.model_copy(update={"burst": None})
    stages = spec.stages.model_copy(update={"saturation": saturation})
    candidate = replace(loaded, spec=spec.model_copy(update={"stages": stages}))
    run_dir.mkdir(parents=True)
    with ExitStack() as resources:
        ctx = RunContext(loaded=candidate, run_id=run_dir.name, run_dir=run_dir,
                         env=dict(env), resources=resources, progress=progress)
        ctx.server = server
        return run_pipeline(ctx, None, command="tune-verify", selected=VERIFIED_STAGES)


@dataclass(frozen=True)
class CandidateRecord:
    """What tune reads from one verification record."""

    passed: bool
    throughput_rps: float | None
    throughput_source: str
    latency_p99_ms: float | None
    latency_throughput_rps: float | None
    rss_mb: float | None
    gpu_mb: float | None
    failed: list[str]
    message: str


def read_candidate(record: RunRecord) -> CandidateRecord:
    latency = record.metrics(m.LATENCY_STAGE)
    saturation = record.metrics(m.SATURATION_STAGE)
    if m.CAPACITY_RPS in saturation:
        throughput, source = saturation[m.CAPACITY_RPS], m.CAPACITY_RPS
    elif m.KNEE_THROUGHPUT_RPS in saturation:
        throughput, source = saturation[m.KNEE_THROUGHPUT_RPS], m.KNEE_THROUGHPUT_RPS
    else:
        throughput, source = None, "none"
    failed = [f"{gate.name} {gate.outcome}: observed {_show(gate.observed)} vs "
              f"{gate.comparison} {_show(gate.threshold)}{gate.unit}"
              for _, gate in record.gates() if gate.outcome != "passed"]
    bad = record.first_failed_stage()
    message = f"{bad.name}: {bad.message}" if bad else "all gates passed"
    return CandidateRecord(record.status == "passed", throughput, source,
                           latency.get(m.P99_MS), latency.get(m.THROUGHPUT_RPS),
                           latency.get(m.SERVER_RSS_MB), latency.get(m.SERVER_GPU_MB),
                           failed, message)


def _show(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
