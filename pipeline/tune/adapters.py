"""Every contact of `tune` with the server, runner and record APIs, in one place:
preflight, the server session (one process reconfigured in place where the server allows
it, a kind's `reconfigure`), one candidate's verification through the runner, and what tune
reads from a candidate's run record.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipeline import metric_names as m
from pipeline.context import Progress, RunContext, no_progress
from pipeline.errors import UsageError
from pipeline.model.source import resolve_model_source
from pipeline.preflight import Scope, require_ready
from pipeline.record import RunRecord
from pipeline.runner import run_pipeline
from pipeline.servers import server_kind
from pipeline.servers.base import ModelServer, ReconfigurableServer
from pipeline.servers.ports import loopback_ports
from pipeline.spec.models import LoadedSpec
from pipeline.stage_result import GateOutcome, RunStatus
from pipeline.statistics.capacity_figure import CapacityFigure
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


@dataclass
class ServingSession:
    """The server(s) of one tune run: one process reconfigured in place where the server
    allows it (its kind's `launch_reconfigurable`), a fresh process per config otherwise.
    `close` stops whatever is running (by PID, through ManagedProcess)."""

    loaded: LoadedSpec
    folder: Path
    env: Mapping[str, str]
    model_control: bool
    server: ModelServer | None = None
    reconfigurable: ReconfigurableServer | None = None   # `server`, when it can reload
    current: Config | None = None
    served: Config | None = None    # what the running process last served
    starts: int = 0
    reloads: int = 0
    attempts: int = 0               # reconfigurations tried, each in its own folder
    _model_file: Path | None = None
    events: list[dict[str, Any]] = field(default_factory=list)

    def serve(self, config: Config) -> ModelServer:
        """A ready server running `config`; ServerError when it cannot be had."""
        if self.current == config and self.server is not None and self.server.alive():
            return self.server
        started = time.monotonic()
        reloading, served = self.reconfigurable, self.served
        server: ModelServer
        if (reloading is not None and served is not None and reloading.alive()
                and reloading.can_reconfigure(served.device, config.device)):
            server = reloading
            self.current = None
            self.attempts += 1
            scratch = self.folder / "configs" / f"{self.attempts}"
            scratch.mkdir(parents=True)
            try:
                reloading.reconfigure(config.applied(self.loaded), self.model_file(), scratch,
                                      config.label)
            except BaseException:
                self.close()    # half-reconfigured: the next config starts a fresh process
                raise
            self.reloads += 1
            how = "reloaded"
        else:
            self.close()
            server = self._launch(config)
            self.starts += 1
            how = "started"
        self.current = self.served = config
        self.events.append({"config": config.label, "how": how,
                            "seconds": time.monotonic() - started})
        return server

    def close(self) -> None:
        server, self.server, self.current, self.served = self.server, None, None, None
        self.reconfigurable = None
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
        ports = loopback_ports(kind.port_names)
        reloading = kind.launch_reconfigurable(loaded, artifact, ports, where, self.env) \
            if self.model_control else None
        server = reloading or kind.launch(loaded, artifact, ports, where, self.env)
        try:
            server.start()
            server.wait_ready(loaded.spec.stages.readiness.timeout.seconds)
        except BaseException:
            server.stop()
            raise
        self.server, self.reconfigurable = server, reloading
        return server


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
    # The saturation stage's open-loop capacity at the SLO, with its interval; None when no
    # rate was confirmed (then `throughput_rps` is the knee's, a diagnostic).
    capacity: CapacityFigure | None = None


def read_candidate(record: RunRecord) -> CandidateRecord:
    latency, saturation = record.latency(), record.saturation()
    throughput: float | None
    if saturation.capacity_rps is not None:
        throughput, source = saturation.capacity_rps, m.CAPACITY_RPS
    elif saturation.knee_throughput_rps is not None:
        throughput, source = saturation.knee_throughput_rps, m.KNEE_THROUGHPUT_RPS
    else:
        throughput, source = None, "none"
    failed = [f"{gate.name} {gate.outcome}: observed {_show(gate.observed)} vs "
              f"{gate.comparison} {_show(gate.threshold)}{gate.unit}"
              for _, gate in record.gates() if gate.outcome is not GateOutcome.PASSED]
    bad = record.first_failed_stage()
    message = f"{bad.name}: {bad.message}" if bad else "all gates passed"
    figure = CapacityFigure.from_json(record.details(m.SATURATION_STAGE).get("capacity"))
    return CandidateRecord(record.status == RunStatus.PASSED, throughput, source,
                           latency.p99_ms, latency.throughput_rps,
                           latency.server_rss_mb, latency.server_gpu_mb,
                           failed, message, figure)


def _show(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
