"""Serving another config without restarting the server process, where the server allows it.

- Triton: its model-control API (explicit mode) loads the model again with a new
  config.pbtxt: instances, batching and device.
- TorchServe: its model API (off in production configs, `enable_model_api`) unregisters
  the model and registers an archive with the new batchSize, maxBatchDelay and workers.
  The archive carries the batch size for our handler, so each config gets its own. Its
  workers pick their device when the process starts: a device change restarts it.

Both APIs are turned on only for tune's own servers, on loopback; a production config
keeps them off.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from urllib.parse import urlencode

import psutil
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as pb

from pipeline.errors import ServerError
from pipeline.servers import http, server_kind
from pipeline.servers.base import ModelServer
from pipeline.servers.torchserve.properties import RESPONSE_TIMEOUT_S, max_batch_delay_ms
from pipeline.servers.torchserve.server import TorchServeServer
from pipeline.servers.triton.server import TritonEndpoint, TritonServer
from pipeline.spec.models import LoadedSpec

OLD_PROCESS_EXIT_S = 30.0      # an unload waits for in-flight requests; a busy machine is slow


def open_for_reconfiguration(server: ModelServer, model: str) -> None:
    """Before `server.start()`: turn on the API that `reconfigure` uses."""
    if isinstance(server, TorchServeServer):
        server.extra_properties.append("enable_model_api=true")
        return
    process = server.process
    assert process is not None, "only a server started here can be reconfigured"
    # Triton loads the model at start, as it would with model control off.
    argv = process.argv
    argv[argv.index("--model-control-mode=none")] = "--model-control-mode=explicit"
    argv.append(f"--load-model={model}")


def reconfigurable(server: ModelServer, from_device: str, to_device: str) -> bool:
    if isinstance(server, TorchServeServer):
        return from_device == to_device
    return isinstance(server, TritonEndpoint)


def reconfigure(server: ModelServer, loaded: LoadedSpec, model_file: Path, scratch: Path,
                label: str) -> None:
    """Serve `loaded`'s server settings on the running `server`; ServerError when refused.
    Returns once the new config is ready and the old one's processes are gone."""
    timeout_s = loaded.spec.stages.readiness.timeout.seconds
    # The old config's stubs or workers exit on reload: that is not the server dying.
    # Triton loads the new instances before it unloads the old ones, so the old ones may
    # still be running when the new config is ready; they are never watched again.
    retired = (server.model_processes.forget()
               if isinstance(server, TritonServer | TorchServeServer) else [])
    if isinstance(server, TorchServeServer):
        _reregister(server, loaded, model_file, scratch, label, timeout_s)
    elif isinstance(server, TritonEndpoint):
        _reload_triton(server, loaded, model_file, scratch, label, timeout_s)
    else:
        raise ServerError(f"{type(server).__name__} cannot be reconfigured in place")
    server.wait_ready(timeout_s)
    psutil.wait_procs(retired, timeout=OLD_PROCESS_EXIT_S)
    _wait_for_old_processes(server)
    if isinstance(server, TritonServer | TorchServeServer):
        server.model_processes.watch(server.process_tree(), retired)


def _reload_triton(server: TritonEndpoint, loaded: LoadedSpec, model_file: Path,
                   scratch: Path, label: str, timeout_s: float) -> None:
    artifact = server_kind("triton").build(loaded, model_file, scratch)
    config_json = json_format.MessageToJson(text_format.Parse(artifact.config_text,
                                                              pb.ModelConfig()))
    url = f"{server.base_url}/v2/repository/models/{loaded.spec.name}/load"
    body = json.dumps({"parameters": {"config": config_json}}).encode()
    _call(server, "POST", url, body, {"Content-Type": "application/json"}, timeout_s, label)


def _reregister(server: TorchServeServer, loaded: LoadedSpec, model_file: Path,
                scratch: Path, label: str, timeout_s: float) -> None:
    spec = loaded.spec
    artifact = server_kind("torchserve").build(loaded, model_file, scratch)
    archive = f"{spec.name}-{scratch.name}.mar"
    shutil.copyfile(artifact.archive, server.home / "store" / archive)
    auth = server.management_headers()
    _call(server, "DELETE", f"{server.management_url}/models/{spec.name}", b"", auth,
          timeout_s, label)
    query = urlencode({"url": archive, "model_name": spec.name,
                       "batch_size": spec.server.batching.max_batch_size,
                       "max_batch_delay": max_batch_delay_ms(spec),
                       "initial_workers": spec.server.instances,
                       "response_timeout": RESPONSE_TIMEOUT_S, "synchronous": "true"})
    _call(server, "POST", f"{server.management_url}/models?{query}", b"", auth, timeout_s,
          label)
    # Readiness counts the workers the spec asks for.
    server.spec = spec


def _call(server: ModelServer, method: str, url: str, body: bytes, headers: dict[str, str],
          timeout_s: float, label: str) -> None:
    try:
        reply = http.call(method, url, body or None, headers, timeout_s=timeout_s)
    except http.Unreachable as exc:
        raise ServerError(f"reconfiguring {server.kind} for {label}: {exc}") from None
    if reply.status not in (200, 201, 202):
        raise ServerError(f"{server.kind} refused {label} ({method} {reply.status}): "
                          f"{reply.text()[:300]}")


def _wait_for_old_processes(server: ModelServer, quiet_s: float = 1.0,
                            limit_s: float = 15.0) -> None:
    """The previous config's worker processes take a moment to exit; memory is measured
    on the new config's processes only once the tree stops changing."""
    deadline = time.monotonic() + limit_s
    last, since = len(server.process_tree()), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet_s:
        time.sleep(0.1)
        count = len(server.process_tree())
        if count != last:
            last, since = count, time.monotonic()
