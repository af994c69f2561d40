"""The Docker daemon, through the Docker SDK: build, run, watch and push serving images.

Every failure becomes one line that says what and where: no daemon, a base
image that is neither present nor pullable, a refused push, a container that
exited (with its last log lines).
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil

from pipeline.errors import PipelineError, ServerError
from pipeline.servers.docker.images import BuildContext
from pipeline.servers.process import log_tail

DEFAULT_SOCKET = "unix:///var/run/docker.sock"


@dataclass(frozen=True)
class BuiltImage:
    id: str
    tag: str
    labels: dict[str, str]


class DockerEngine:
    def __init__(self, env: Mapping[str, str]) -> None:
        import docker

        self.address = env.get("DOCKER_HOST") or DEFAULT_SOCKET
        socket_path = Path(self.address.removeprefix("unix://"))
        if self.address.startswith("unix://") and not socket_path.exists():
            raise PipelineError(f"no Docker daemon reachable at {self.address}: no such socket "
                                "(start dockerd or set DOCKER_HOST)")
        try:
            self.client = docker.DockerClient(base_url=self.address, timeout=120)
            self.client.ping()
        except Exception as exc:  # the SDK raises several kinds for "nobody there"
            raise PipelineError(f"no Docker daemon reachable at {self.address}: "
                                f"{_first_line(exc)} (start dockerd or set DOCKER_HOST)") from None

    def ensure_base(self, base: str) -> None:
        import docker

        try:
            self.client.images.get(base)
            return
        except docker.errors.ImageNotFound:
            pass
        try:
            self.client.images.pull(base)
        except docker.errors.APIError as exc:
            raise PipelineError(f"base image {base} is not on the Docker host at {self.address} "
                                f"and could not be pulled: {_first_line(exc)}") from None

    def build(self, context: BuildContext, tag: str, base: str) -> BuiltImage:
        import docker

        self.ensure_base(base)
        try:
            image, _ = self.client.images.build(
                fileobj=io.BytesIO(context.tar()), custom_context=True, tag=tag, rm=True,
                forcerm=True, pull=False, labels=context.labels)
        except docker.errors.BuildError as exc:
            raise PipelineError(f"docker build of {tag} failed: {_first_line(exc)}") from None
        except docker.errors.APIError as exc:
            raise PipelineError(f"docker build of {tag} failed: {_first_line(exc)}") from None
        return BuiltImage(str(image.id), tag, dict(context.labels))

    def push(self, image: BuiltImage, repository: str, tag: str) -> str:
        """Tag and push; the registry's manifest digest (sha256:...)."""
        import docker

        try:
            self.client.images.get(image.id).tag(repository, tag)
            digest = None
            for event in self.client.images.push(repository, tag, stream=True, decode=True):
                if "error" in event:
                    raise PipelineError(f"push of {repository}:{tag} refused: "
                                        f"{str(event['error']).strip()}")
                aux = event.get("aux") or {}
                digest = aux.get("Digest", digest)
        except docker.errors.APIError as exc:
            raise PipelineError(f"push of {repository}:{tag} failed: {_first_line(exc)}") from None
        if not digest:
            raise PipelineError(f"push of {repository}:{tag} reported no digest")
        return str(digest)

    def has_gpus(self) -> bool:
        runtimes = self.client.info().get("Runtimes", {})
        return "nvidia" in runtimes or Path("/dev/nvidiactl").exists()

    def container(self, image: str, *, ports: Mapping[int, int], shm_size: str,
                  memory_limit: str | None, gpus: bool, command: list[str] | None,
                  log_path: Path, name: str,
                  volumes: Mapping[str, str] | None = None) -> Container:
        """A container of `image`, not started: `start()` (or `with`) runs it."""
        import docker

        options: dict[str, Any] = {
            "detach": True, "name": name, "shm_size": shm_size,
            "ports": {f"{inside}/tcp": ("127.0.0.1", outside)
                      for inside, outside in ports.items()},
            "labels": {"io.serve-pipeline.run": name},
            # Only the image's own environment: nothing of ours (store credentials) inside.
            "environment": {},
        }
        if memory_limit:
            options["mem_limit"] = memory_limit
        if gpus:
            options["device_requests"] = [docker.types.DeviceRequest(count=-1,
                                                                     capabilities=[["gpu"]])]
        if volumes:
            options["volumes"] = {host: {"bind": inside, "mode": "rw"}
                                  for host, inside in volumes.items()}
        return Container(self.client, image, command, options, log_path)


class Container:
    """A container: run, liveness, exit, logs streamed to a file, stop and remove.

    The constructor creates nothing; `start()` runs it; `stop()` (idempotent) stops and
    removes it. As a context manager it starts on enter and is removed on exit."""

    def __init__(self, client: Any, image: str, command: list[str] | None,
                 options: Mapping[str, Any], log_path: Path) -> None:
        self.client = client
        self.image = image
        self.command = command
        self.options = dict(options)
        self.log_path = log_path
        self.name = str(options["name"])
        self.started_at: float | None = None
        self.container: Any = None
        self._follow: threading.Thread | None = None

    def start(self) -> None:
        import docker

        self.started_at = time.monotonic()
        try:
            self.container = self.client.containers.run(self.image, self.command,
                                                         **self.options)
        except docker.errors.APIError as exc:
            raise ServerError(f"docker run of {self.image} failed: {_first_line(exc)}") from None
        self._follow = threading.Thread(target=self._stream_logs, daemon=True)
        self._follow.start()

    def _stream_logs(self) -> None:
        with contextlib.suppress(Exception), self.log_path.open("ab") as log:
            for chunk in self.container.logs(stream=True, follow=True):
                log.write(chunk)
                log.flush()

    def _state(self) -> dict[str, Any]:
        if self.container is None:
            return {"Running": False, "Status": "never started"}
        try:
            self.container.reload()
        except Exception:  # removed or the daemon went away: treat as not running
            return {"Running": False, "Status": "gone"}
        state: dict[str, Any] = self.container.attrs.get("State", {})
        return state

    def is_running(self) -> bool:
        return bool(self._state().get("Running"))

    def describe_exit(self) -> str:
        if self.container is None:
            return "was never started"
        state = self._state()
        if state.get("Running"):
            return "still running"
        if state.get("OOMKilled"):
            return "was killed for memory (OOM)"
        return f"exited with code {state.get('ExitCode', '?')}"

    def log_tail(self, lines: int = 12) -> list[str]:
        return log_tail(self.log_path, lines)

    def tree(self) -> list[psutil.Process]:
        pid = int(self._state().get("Pid") or 0)
        if not pid:
            return []
        try:
            root = psutil.Process(pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def stop(self, grace_s: int = 15) -> None:
        if self.container is None:
            return
        with contextlib.suppress(Exception):
            self.container.stop(timeout=grace_s)
        with contextlib.suppress(Exception):
            self.container.remove(force=True)
        if self._follow is not None:
            self._follow.join(timeout=5)

    def __enter__(self) -> Container:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
