"""Triton Inference Server: the installation, the local process, health and statistics."""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import json
import os
import re
import secrets
import shutil
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import ServerError
from pipeline.model.tensors import Array, Batch
from pipeline.request_types import GrpcRequest, HttpRequest
from pipeline.servers import http
from pipeline.servers.base import (
    EndpointLifecycle,
    ReadinessWords,
    RemoteLiveness,
)
from pipeline.servers.environment import server_environment
from pipeline.servers.model_processes import ModelProcesses
from pipeline.servers.process import ManagedProcess
from pipeline.servers.reconfiguration import swap_config
from pipeline.servers.triton import kserve
from pipeline.servers.triton.passthrough import server_flags
from pipeline.servers.triton.reload import reload_model
from pipeline.servers.triton.stats import TritonStats
from pipeline.servers.triton.wire_shapes import from_wire
from pipeline.spec.models import LoadedSpec, ProbeName

# ---------------------------------------------------------------- installation


@dataclass(frozen=True)
class TritonInstallation:
    """The tritonserver binary and python backend bundled in the nvidia-pytriton wheel."""

    binary: Path
    backend_dir: Path
    stub: Path
    lib_dirs: tuple[Path, ...]

    @classmethod
    def find(cls) -> TritonInstallation:
        found = importlib.util.find_spec("pytriton")
        if found is None or not found.submodule_search_locations:
            raise ServerError("tritonserver not found: install nvidia-pytriton==0.7.0 "
                              "(it bundles tritonserver and its python backend)")
        package = Path(next(iter(found.submodule_search_locations)))
        server = package / "tritonserver"
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        stub = server / "python_backend_stubs" / version / "triton_python_backend_stub"
        binary = server / "bin" / "tritonserver"
        for needed in (binary, stub, server / "backends" / "python" / "libtriton_python.so"):
            if not needed.exists():
                raise ServerError(f"incomplete Triton install: {needed} is missing")
        libs = package.parent / "nvidia_pytriton.libs"
        python_libdir = Path(str(sysconfig.get_config_var("LIBDIR") or ""))
        return cls(binary, server / "backends" / "python", stub, (libs, python_libdir))

    @property
    def cache_directory(self) -> Path:
        """Where the response cache implementations are (`caches/local`)."""
        return self.binary.parent.parent / "caches"

    def prepare_backends(self, destination: Path) -> Path:
        """A backend directory with the python backend and the stub for this interpreter."""
        python_dir = destination / "python"
        python_dir.mkdir(parents=True, exist_ok=True)
        for source in (self.backend_dir / "libtriton_python.so",
                       self.backend_dir / "triton_python_backend_utils.py", self.stub):
            target = python_dir / source.name
            if not target.exists():
                shutil.copy2(source, target)
        return destination

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """The server's environment: the allowlist of `base` (pipeline.servers.environment;
        the stubs that run the model inherit it), and where the stub finds its parts."""
        libs = [str(p) for p in self.lib_dirs if str(p)]
        if base.get("LD_LIBRARY_PATH"):
            libs.append(base["LD_LIBRARY_PATH"])
        # The stub finds its interpreter (and numpy, torch) through python3 on PATH.
        return server_environment(
            base, PATH=os.pathsep.join([str(Path(sys.executable).parent), base.get("PATH", "")]),
            LD_LIBRARY_PATH=os.pathsep.join(libs))


# ---------------------------------------------------------------- the process

STUB_MARK = "triton_python_backend_stub"
SHM_PREFIX = "triton_python_backend_shm_region_"   # the python backend's default prefix
SHM_DIR = Path("/dev/shm")
STOP_GRACE_S = 15.0
DEAD_STUB_GRACE_S = 3.0


def remove_shm_regions(prefix: str, folder: Path = SHM_DIR) -> list[str]:
    """Remove the shared-memory regions named with `prefix` (one server's own); the names
    removed. A stopped server's are gone already; a killed one leaves its regions."""
    removed = []
    for region in folder.glob(glob.escape(prefix) + "*"):
        with contextlib.suppress(FileNotFoundError):
            region.unlink()
            removed.append(region.name)
    return removed


# Logged on every machine without a GPU; not a reason for anything.
_BENIGN_ERRORS = ("CudaDriverHelper has not been initialized",)
_ERROR_LINE = re.compile(r'^E\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] "?(.*?)"?$')


def log_excerpt(lines: list[str]) -> str:
    """The log's most telling error (a model that failed to load), else its last lines."""
    errors = [line for line in lines if _is_real_error(line)]
    if errors:
        preferred = [e for e in errors if "failed to load" in e] or errors
        return "log: " + _error_text(preferred[0])
    return "last log lines: " + " | ".join(lines[-6:])


def model_death_excerpt(lines: list[str]) -> str:
    """What the log says about a python-backend stub (tritonserver 2.51 logs nothing when
    one is killed: then its last lines)."""
    about = [line for line in lines if "stub" in line.lower() and _is_real_error(line)]
    return "log: " + _error_text(about[-1]) if about else log_excerpt(lines)


def _is_real_error(line: str) -> bool:
    return bool(_ERROR_LINE.match(line)) and not any(b in line for b in _BENIGN_ERRORS)


def _error_text(line: str, limit: int = 300) -> str:
    match = _ERROR_LINE.match(line)
    text = match.group(1) if match else line
    kept = []
    for part in text.replace('\\"', '"').split("\\n"):
        part = part.replace("\\t", " ").strip()
        if part == "At:":  # a Python traceback follows
            break
        if part:
            kept.append(part)
    text = " ".join(kept)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class TritonEndpoint(EndpointLifecycle):
    """A Triton server reached over HTTP (and gRPC); started by us or already running."""

    kind = "triton"
    WORDS = ReadinessWords("tritonserver", "not ready", poll_s=0.1)

    def __init__(self, loaded: LoadedSpec, base_url: str, grpc_target: str | None) -> None:
        self.spec = loaded.spec
        self.model_name = loaded.spec.name
        self.base_url = base_url.rstrip("/")
        self.grpc_target = grpc_target
        self.ports: dict[str, int] = {}
        self.process: ManagedProcess | None = None
        self.ready_timeout_s = loaded.spec.stages.readiness.timeout.seconds
        self._answering = RemoteLiveness(f"{self.base_url}/v2/health/live")

    def describe_death(self) -> str:
        return self._answering.stopped(f"the server at {self.base_url}")

    def is_ready(self, timeout_s: float = 2.0) -> bool:
        try:
            server = http.call("GET", f"{self.base_url}/v2/health/ready", timeout_s=timeout_s)
            model = http.call("GET", f"{self.base_url}/v2/models/{self.model_name}/ready",
                              timeout_s=timeout_s)
        except http.Unreachable:
            return False
        return server.status == 200 and model.status == 200

    def log_excerpt(self) -> str:
        return f"{self.base_url} did not report ready"

    def stats(self) -> TritonStats:
        url = f"{self.base_url}/v2/models/{self.model_name}/stats"
        try:
            reply = http.call("GET", url, timeout_s=5.0)
        except http.Unreachable as exc:
            held = self.process.stopped_note() if self.process is not None else ""
            raise ServerError(f"cannot read statistics: {exc}{held}") from None
        if reply.status != 200:
            raise ServerError(f"GET {url} answered {reply.status}: {reply.text()[:200]}")
        return TritonStats.from_json(json.loads(reply.body))

    def infer_request(self, batch: Batch) -> HttpRequest:
        model = self.spec.model
        return kserve.encode_infer(self.base_url, self.model_name, batch, model.inputs,
                                   [t.name for t in model.outputs])

    def decode_outputs(self, response: http.Response) -> dict[str, Array]:
        return from_wire(kserve.decode_outputs(response.body, response.headers),
                         self.spec.model.outputs)

    def grpc_request(self, batch: Batch) -> GrpcRequest | None:
        if self.grpc_target is None:
            return None
        model = self.spec.model
        return kserve.grpc_infer(self.grpc_target, self.model_name, batch, model.inputs,
                                 [t.name for t in model.outputs])

    def probe_request(self, probe: ProbeName, size: int | None = None) -> HttpRequest:
        return kserve.probe_request(self.base_url, self.model_name, self.spec.model,
                                    self.spec.server.batching.max_batch_size, probe, size)


class TritonServer(TritonEndpoint):
    """A local tritonserver process serving one model repository on loopback.

    `copy_to`: serve a copy of `repository` made there at start (Triton's python stubs
    write __pycache__ next to model.py, so a digested build output is never served)."""

    def __init__(self, installation: TritonInstallation, repository: Path, loaded: LoadedSpec,
                 ports: Mapping[str, int], run_dir: Path, env: Mapping[str, str], *,
                 copy_to: Path | None = None, model_control: bool = False) -> None:
        super().__init__(loaded, f"http://127.0.0.1:{ports['http']}",
                         f"127.0.0.1:{ports['grpc']}")
        self.ports = dict(ports)
        self.installation = installation
        self.source = repository
        self.repository = copy_to or repository
        self.backends = run_dir / "triton-backends"
        self.shm_prefix = f"{SHM_PREFIX}sp{os.getpid()}x{secrets.token_hex(4)}_"
        argv = [
            str(installation.binary),
            f"--model-repository={self.repository}",
            f"--backend-directory={self.backends}",
            "--http-address=127.0.0.1", f"--http-port={ports['http']}",
            "--grpc-address=127.0.0.1", f"--grpc-port={ports['grpc']}",
            "--metrics-address=127.0.0.1", f"--metrics-port={ports['metrics']}",
            "--allow-gpu-metrics=false", "--allow-cpu-metrics=true",
            "--allow-sagemaker=false", "--allow-vertex-ai=false",
            "--exit-on-error=true", "--strict-readiness=true",
            # The repository API stays off (the model set is fixed by the release), except
            # for tune's own servers, which load the model at start as mode none would.
            *(["--model-control-mode=explicit", f"--load-model={self.model_name}"]
              if model_control else ["--model-control-mode=none"]),
            # Shared-memory regions named for this server alone, so that those a killed
            # server leaves in /dev/shm can be removed without touching anyone else's.
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
            *server_flags(loaded.spec, installation.cache_directory),
        ]
        self.local = ManagedProcess(argv, run_dir / "server.log",
                                    installation.environment(env), cwd=run_dir)
        self.process = self.local
        self.model_processes = ModelProcesses(STUB_MARK, "the python-backend stub")

    def start(self) -> None:
        if self.repository != self.source:
            shutil.copytree(self.source, self.repository)
        self.installation.prepare_backends(self.backends)
        self.local.start()
        self.started_at = self.local.started_at

    def wait_ready(self, timeout_s: float) -> float:
        seconds = super().wait_ready(timeout_s)
        self.model_processes.watch(self.local.tree())
        return seconds

    def alive(self) -> bool:
        return self.local.is_running() and self.model_processes.dead() is None

    def stop(self) -> None:
        # With a stub dead, tritonserver's graceful stop waits for its instance to unload,
        # which never happens: only a short grace before the kill.
        dead = self.model_processes.dead() is not None
        self.local.stop(grace_s=DEAD_STUB_GRACE_S if dead else STOP_GRACE_S)
        remove_shm_regions(self.shm_prefix)

    def describe_death(self) -> str:
        dead = self.model_processes.dead() if self.local.is_running() else None
        if dead is not None:
            return (f"{self.model_processes.describe(dead)}; "
                    f"{model_death_excerpt(self.local.log_tail(400))}")
        return f"tritonserver {self.local.describe_exit()}; {self.log_excerpt()}"

    def log_excerpt(self) -> str:
        return log_excerpt(self.local.log_tail(400))

    def can_reconfigure(self, from_device: str, to_device: str) -> bool:
        return True

    def reconfigure(self, loaded: LoadedSpec, model_file: Path, scratch: Path,
                    label: str) -> None:
        """Load the model again through the model-control API with a new config.pbtxt:
        instances, batching and device."""
        timeout_s = loaded.spec.stages.readiness.timeout.seconds
        swap_config(self.model_processes, self.process_tree,
                    lambda: reload_model(self.base_url, loaded, model_file, scratch, label,
                                         timeout_s),
                    lambda: self.wait_ready(timeout_s))
