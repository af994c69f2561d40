"""TorchServe: a reproducible .mar and an isolated local JVM serving it.

Isolation: each run gets its own working directory (key_file.json, logs),
TMPDIR/TEMP (pid file, worker sockets, extracted models), ports on 127.0.0.1
(gRPC too: TorchServe always opens it) and `--ncs`. Token authorization stays
on; the keys are read from key_file.json, sent as Bearer tokens, never printed,
and the key file is deleted at stop.
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import ServerError
from pipeline.model.tensors import NUMPY_DTYPES, Array, Batch, misshapen
from pipeline.request_types import GrpcRequest, HttpRequest
from pipeline.servers import http
from pipeline.servers.base import (
    BuiltArtifact,
    EndpointLifecycle,
    ReadinessWords,
    RemoteLiveness,
)
from pipeline.servers.environment import server_environment
from pipeline.servers.model_processes import ModelProcesses
from pipeline.servers.process import ManagedProcess
from pipeline.servers.reconfiguration import swap_config
from pipeline.servers.torchserve.json_tensors import from_json_tensor, json_tensor
from pipeline.servers.torchserve.properties import (
    render_properties,
)
from pipeline.servers.torchserve.register import register_config
from pipeline.servers.torchserve.stats import TorchServeStats
from pipeline.spec.models import (
    DECLARED_HUGE_BYTES,
    OVERSIZED_BODY_BYTES,
    LoadedSpec,
    ProbeName,
)
from pipeline.spec.strings import STRING, is_string

# ---------------------------------------------------------------- the process

# The most telling line first: each is tried in order over the launcher's output and
# TorchServe's logs.
_TELLING = (
    re.compile(r"java not found.*"),
    re.compile(r"Failed to bind to address[^\n]*"),
    re.compile(r"Address already in use"),
    re.compile(r"Failed to load model [^\n]*"),
    # A Python exception's last line: builtins.RuntimeError, onnxruntime's InvalidProtobuf.
    re.compile(r"(?<=MODEL_LOG - )(?:(?:\w+\.)+[A-Z]\w*|\w+(?:Error|Exception)): [^\n]*"),
    re.compile(r"TorchServe is already running[^\n]*"),
    re.compile(r"Backend worker process died[^\n]*"),
    re.compile(r"Worker disconnected[^\n]*"),
    re.compile(r"ModelNotFoundException[^\n]*"),
)


class TorchServeEndpoint(EndpointLifecycle):
    """A TorchServe reached over its HTTP APIs; started by us or already running."""

    kind = "torchserve"
    WORDS = ReadinessWords("torchserve", "workers not READY", poll_s=0.2)

    def __init__(self, loaded: LoadedSpec, inference_url: str, management_url: str,
                 metrics_url: str, key_file: Path | None) -> None:
        self.spec = loaded.spec
        self.model_name = loaded.spec.name
        self.inference_url = inference_url.rstrip("/")
        self.management_url = management_url.rstrip("/")
        self.metrics_url = metrics_url.rstrip("/")
        self.key_file = key_file
        self.ports: dict[str, int] = {}
        self.process: ManagedProcess | None = None
        self.ready_timeout_s = loaded.spec.stages.readiness.timeout.seconds
        self._keys: dict[str, str] | None = None
        self._answering = RemoteLiveness(f"{self.metrics_url}/metrics")

    def describe_death(self) -> str:
        return self._answering.stopped(f"TorchServe at {self.inference_url}")

    def log_excerpt(self) -> str:
        return f"{self.management_url} did not report the workers READY"

    def _key(self, api: str) -> str:
        if self.key_file is None:
            return ""
        if self._keys is None:
            try:
                body = json.loads(self.key_file.read_text())
            except (FileNotFoundError, ValueError):
                raise ServerError(f"no readable TorchServe key file at {self.key_file}") from None
            self._keys = {name: str(body[name]["key"]) for name in ("inference", "management")}
        return str(self._keys[api])

    def _auth(self, api: str) -> dict[str, str]:
        key = self._key(api)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def management_headers(self) -> dict[str, str]:
        return self._auth("management")

    # ---- health

    def is_ready(self, timeout_s: float = 2.0) -> bool:
        try:
            reply = http.call("GET", f"{self.management_url}/models/{self.model_name}",
                              headers=self._auth("management"), timeout_s=timeout_s)
        except (http.Unreachable, ServerError):
            return False
        if reply.status != 200:
            return False
        try:
            described = json.loads(reply.body)
            workers = described[0]["workers"]
        except (ValueError, LookupError, TypeError):
            return False
        return len(workers) >= self.spec.server.instances and \
            all(worker.get("status") == "READY" for worker in workers)

    def stats(self) -> TorchServeStats:
        try:
            reply = http.call("GET", f"{self.metrics_url}/metrics", timeout_s=5.0)
        except http.Unreachable as exc:
            held = self.process.stopped_note() if self.process is not None else ""
            raise ServerError(f"cannot read TorchServe metrics: {exc}{held}") from None
        if reply.status != 200:
            raise ServerError(f"TorchServe /metrics answered {reply.status}")
        return TorchServeStats.from_prometheus(reply.text(), self.model_name)

    # ---- inference

    def infer_request(self, batch: Batch) -> HttpRequest:
        if any(is_string(array) for array in batch.values()):
            # .npy cannot carry text without pickle, which the handler refuses: JSON.
            body = {"inputs": {name: json_tensor(array) for name, array in batch.items()}}
            return HttpRequest("POST", f"{self.inference_url}/predictions/{self.model_name}",
                               json.dumps(body).encode(),
                               {"Content-Type": "application/json", **self._auth("inference")})
        buffer = io.BytesIO()
        if len(batch) == 1:
            np.save(buffer, next(iter(batch.values())), allow_pickle=False)
        else:
            np.savez(buffer, **batch)
        return HttpRequest("POST", f"{self.inference_url}/predictions/{self.model_name}",
                           buffer.getvalue(),
                           {"Content-Type": "application/octet-stream", **self._auth("inference")})

    def decode_outputs(self, response: http.Response) -> dict[str, Array]:
        try:
            return self._decoded(response)
        except Exception as exc:  # any bytes can arrive here: whatever fails, the answer is bad
            raise ServerError(f"the server's answer could not be decoded: "
                              f"{type(exc).__name__}: {exc}") from None

    def _decoded(self, response: http.Response) -> dict[str, Array]:
        content_type = response.headers.get("content-type", "")
        names = [t.name for t in self.spec.model.outputs]
        if "json" in content_type:
            body = json.loads(response.body)["outputs"]
            return {name: from_json_tensor(tensor) for name, tensor in body.items()}
        if response.body[:6] == b"\x93NUMPY":
            return {names[0]: np.load(io.BytesIO(response.body), allow_pickle=False)}
        with np.load(io.BytesIO(response.body), allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}

    def probe_request(self, probe: ProbeName, size: int | None = None) -> HttpRequest:
        """What a broken client would send (variable dimensions `size` long; the smallest
        of model.sizes when None)."""
        model = self.spec.model
        url = f"{self.inference_url}/predictions/{self.model_name}"
        if size is None and model.sizes is not None:
            size = model.sizes.values[0]
        if probe == "oversized_body":
            first = model.inputs[0]
            one = first.item_shape(size)
            if first.dtype == STRING:
                body = {"inputs": {first.name: {"shape": [1, *one], "dtype": STRING,
                                                "data": ["a" * OVERSIZED_BODY_BYTES]}}}
                return HttpRequest("POST", url, json.dumps(body).encode(),
                                   {"Content-Type": "application/json",
                                    **self._auth("inference")})
            item = int(np.prod(one)) * np.dtype(NUMPY_DTYPES[first.dtype]).itemsize
            rows = max(1, OVERSIZED_BODY_BYTES // item)
            buffer = io.BytesIO()
            np.save(buffer, np.zeros((rows, *one), dtype=NUMPY_DTYPES[first.dtype]),
                    allow_pickle=False)
            return HttpRequest("POST", url, buffer.getvalue(),
                               {"Content-Type": "application/octet-stream",
                                **self._auth("inference")})
        if probe == "declared_huge_shape":
            first = model.inputs[0]
            body = {"inputs": {first.name: {"shape": [1, DECLARED_HUGE_BYTES // 4],
                                            "dtype": first.dtype, "data": [0] * 16}}}
            return HttpRequest("POST", url, json.dumps(body).encode(),
                               {"Content-Type": "application/json", **self._auth("inference")})
        count = self.spec.server.batching.max_batch_size + 1 if probe == "batch_over_max" else 1
        inputs: dict[str, Any] = {}
        for position, tensor in enumerate(model.inputs):
            if probe == "missing_input" and position == 0:
                continue
            per_item = misshapen(tensor, size) if position == 0 and probe == "wrong_shape" \
                else list(tensor.item_shape(size))
            shape = [count, *per_item]
            dtype = tensor.dtype
            if position == 0 and probe == "wrong_dtype":
                dtype = "int32" if dtype.startswith("float") else "float32"
            values = int(np.prod(shape))
            filler: Any = False if dtype == "bool" else "a" if dtype == STRING else 0
            inputs[tensor.name] = {"shape": shape, "dtype": dtype, "data": [filler] * values}
        name = f"{self.model_name}-does-not-exist" if probe == "unknown_model" else \
            self.model_name
        return HttpRequest("POST", f"{self.inference_url}/predictions/{name}",
                           json.dumps({"inputs": inputs}).encode(),
                           {"Content-Type": "application/json", **self._auth("inference")})

    def grpc_request(self, batch: Batch) -> GrpcRequest | None:
        """TorchServe's gRPC API is not measured (validate refuses protocol: grpc)."""
        return None


class TorchServeServer(TorchServeEndpoint):
    """A local TorchServe, isolated in its own folder, temp folder and loopback ports."""

    def __init__(self, loaded: LoadedSpec, artifact: BuiltArtifact, ports: Mapping[str, int],
                 run_dir: Path, env: Mapping[str, str], *, model_api: bool = False) -> None:
        home = run_dir / "torchserve"
        super().__init__(loaded, f"http://127.0.0.1:{ports['inference']}",
                         f"http://127.0.0.1:{ports['management']}",
                         f"http://127.0.0.1:{ports['metrics']}", home / "key_file.json")
        self.ports = dict(ports)
        self.home = home
        self.archive = artifact.archive
        # Worker sockets live in $TEMP and AF_UNIX paths are limited to ~107 bytes: a short,
        # private temp folder rather than one under a possibly deep run folder (made at
        # start, mode 0700, as mkdtemp would).
        self.scratch = Path(tempfile.gettempdir()) / f"sp-ts-{secrets.token_hex(6)}"
        config = self.home / "config.properties"
        launcher = Path(sys.executable).parent / "torchserve"
        argv = [str(launcher), "--start", "--foreground", "--ncs", "--ts-config", str(config),
                "--model-store", str(self.home / "store")]
        # The allowlist of `env` (pipeline.servers.environment): the JVM and its Python
        # workers inherit it.
        child_env = server_environment(
            env, PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
            TMPDIR=str(self.scratch), TEMP=str(self.scratch),
            LOG_LOCATION=str(self.home / "logs"), METRICS_LOCATION=str(self.home / "logs"))
        self.local = ManagedProcess(argv, run_dir / "server.log", child_env, cwd=self.home,
                                    launcher=True)
        self.process = self.local
        self.model_processes = ModelProcesses("model_service_worker", "a TorchServe worker")
        # Tune's own servers register each config through the model API.
        self.extra_properties = ["enable_model_api=true"] if model_api else []

    def start(self) -> None:
        for folder in ("logs", "store"):
            (self.home / folder).mkdir(parents=True, exist_ok=True)
        self.scratch.mkdir(mode=0o700)
        shutil.copyfile(self.archive, self.home / "store" / f"{self.model_name}.mar")
        rendered = render_properties(self.spec, self.ports, str(self.home / "store"),
                                     loopback_only=True)
        (self.home / "config.properties").write_text(
            "\n".join([rendered.rstrip("\n"), *self.extra_properties]) + "\n")
        self.local.start()
        self.started_at = self.local.started_at

    def wait_ready(self, timeout_s: float) -> float:
        seconds = super().wait_ready(timeout_s)
        # From now on a worker that dies is the server failing, even though the JVM lives
        # on and starts another one.
        self.model_processes.watch(self.local.tree())
        return seconds

    def startup_failure(self) -> str | None:
        if self._worker_failures() >= 2 * self.spec.server.instances:
            return (f"TorchServe workers keep dying while they load the model "
                    "or start serving it "
                    f"(TorchServe retries forever): {self.log_excerpt()}")
        return None

    def alive(self) -> bool:
        return self.local.is_running() and self.model_processes.dead() is None

    def stop(self) -> None:
        self.local.stop()
        # The keys must not outlive the server; nor its pid file, worker sockets and
        # extracted models (all under its private TMPDIR).
        (self.home / "key_file.json").unlink(missing_ok=True)
        shutil.rmtree(self.scratch, ignore_errors=True)

    # ---- keys and logs

    def log_excerpt(self) -> str:
        texts = []
        for path in (self.local.log_path, self.home / "logs" / "ts_log.log",
                     self.home / "logs" / "model_log.log"):
            try:
                texts.append(path.read_text(errors="replace"))
            except FileNotFoundError:
                continue
        joined = "\n".join(texts)
        for pattern in _TELLING:
            found = [match.group(0) for match in pattern.finditer(joined)]
            if found:
                return "log: " + found[-1].strip()[:300]
        return "last log lines: " + " | ".join(self.local.log_tail(6))

    def describe_death(self) -> str:
        dead = self.model_processes.dead() if self.local.is_running() else None
        if dead is not None:
            return f"{self.model_processes.describe(dead)}; {self.log_excerpt()}"
        exit_text = self.local.describe_exit()
        if exit_text == "exited with code 0":
            # The launcher (--foreground) returns 0 however its frontend ended, a kill -9
            # or the OOM killer included: it does not say how, so neither can we.
            exit_text = ("stopped unexpectedly: its frontend (java) is gone and the launcher "
                         "exited with code 0, which it does however the frontend ended (a kill "
                         "or the OOM killer look like this)")
        return f"torchserve {exit_text}; {self.log_excerpt()}"

    def can_reconfigure(self, from_device: str, to_device: str) -> bool:
        """Its workers pick their device when the process starts: a device change restarts."""
        return from_device == to_device

    def reconfigure(self, loaded: LoadedSpec, model_file: Path, scratch: Path,
                    label: str) -> None:
        """Unregister the model and register an archive with the new batchSize,
        maxBatchDelay and workers (the archive carries the batch size for our handler, so
        each config gets its own)."""
        timeout_s = loaded.spec.stages.readiness.timeout.seconds

        def apply() -> None:
            register_config(self.management_url, self.management_headers(),
                            self.home / "store", loaded, model_file, scratch, label, timeout_s)
            self.spec = loaded.spec     # readiness counts the workers the spec asks for

        swap_config(self.model_processes, self.process_tree, apply,
                    lambda: self.wait_ready(timeout_s))

    def _worker_failures(self) -> int:
        """How often a worker failed to come up (TorchServe retries forever)."""
        try:
            text = (self.home / "logs" / "ts_log.log").read_text(errors="replace")
        except FileNotFoundError:
            return 0
        return text.count("Backend worker process died")
