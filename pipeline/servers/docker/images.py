"""Serving images: the build context (pure), and building, running and pushing with Docker.

The context holds the served artifact and the rendered production config, and
labels that carry the model, artifact, config and spec digests. It is a
deterministic tar (sorted entries, fixed times and owners), so the same inputs
give the same context and Docker's build cache gives the same image on the same
daemon; across fresh daemons Docker stamps creation times, so image digests
differ there (a limit of the legacy builder, noted in docs/serving-images.md).
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.spec.models import Spec

# NVIDIA's Triton image runs as triton-server (uid 1000) and TorchServe's as
# model-server (uid 1000): a numeric user works on any base, named or not.
SERVING_USER = "1000:1000"
TORCHSERVE_HOME = "/home/model-server"


@dataclass(frozen=True)
class ImageDigests:
    model: str
    artifact: str
    config: str
    spec: str


@dataclass(frozen=True)
class BuildContext:
    dockerfile: str
    files: dict[str, bytes] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    def tar(self) -> bytes:
        """The context as a deterministic tar: same files, same bytes."""
        buffer = io.BytesIO()
        entries = {"Dockerfile": self.dockerfile.encode(), **self.files}
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
            for name in sorted(entries):
                data = entries[name]
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                archive.addfile(info, io.BytesIO(data))
        return buffer.getvalue()


def labels_for(spec: Spec, digests: ImageDigests) -> dict[str, str]:
    base = spec.server.image.base if spec.server.image is not None else None
    return {
        "org.opencontainers.image.title": spec.name,
        "org.opencontainers.image.base.name": base or "",
        "io.serve-pipeline.server": spec.server.kind,
        "io.serve-pipeline.model.sha256": digests.model,
        "io.serve-pipeline.artifact.sha256": digests.artifact,
        "io.serve-pipeline.config.sha256": digests.config,
        "io.serve-pipeline.spec.sha256": digests.spec,
    }


def _label_lines(labels: Mapping[str, str]) -> str:
    return "\n".join(f"LABEL {key}={json.dumps(value)}" for key, value in sorted(labels.items()))


def _tree(root: Path, prefix: str) -> dict[str, bytes]:
    return {f"{prefix}/{path.relative_to(root).as_posix()}": path.read_bytes()
            for path in sorted(root.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts}


def triton_context(spec: Spec, repository: Path, digests: ImageDigests,
                   production_ports: Mapping[str, int],
                   server_flags: Sequence[str] = ()) -> BuildContext:
    """FROM the Triton base, the model repository at /models, started with the production
    flags (the repository API off, strict readiness) and the model's `server_flags` (its
    response cache), exposing `production_ports`."""
    assert spec.server.image is not None and spec.server.image.base is not None
    labels = labels_for(spec, digests)
    gpu = "true" if spec.server.device == "gpu" else "false"
    command = ["--model-repository=/models", "--model-control-mode=none",
               "--strict-readiness=true", "--exit-on-error=true",
               f"--allow-gpu-metrics={gpu}", "--allow-sagemaker=false",
               "--allow-vertex-ai=false", *server_flags]
    dockerfile = "\n".join([
        f"FROM {spec.server.image.base}",
        _label_lines(labels),
        f"COPY --chown={SERVING_USER} models/ /models/",
        f"USER {SERVING_USER}",
        f"EXPOSE {' '.join(str(p) for p in production_ports.values())}",
        'ENTRYPOINT ["tritonserver"]',
        f"CMD {json.dumps(command)}",
    ]) + "\n"
    return BuildContext(dockerfile, _tree(repository, "models"), labels)


def torchserve_context(spec: Spec, mar: Path, config_text: str, digests: ImageDigests,
                       production_ports: Mapping[str, int]) -> BuildContext:
    """FROM the TorchServe base, the .mar in its model store and the production
    config.properties, started in the foreground with token auth on, exposing
    `production_ports`."""
    assert spec.server.image is not None and spec.server.image.base is not None
    labels = labels_for(spec, digests)
    command = ["torchserve", "--start", "--foreground", "--ncs", "--ts-config",
               f"{TORCHSERVE_HOME}/config.properties", "--model-store",
               f"{TORCHSERVE_HOME}/model-store"]
    dockerfile = "\n".join([
        f"FROM {spec.server.image.base}",
        _label_lines(labels),
        f"COPY --chown={SERVING_USER} model-store/ {TORCHSERVE_HOME}/model-store/",
        f"COPY --chown={SERVING_USER} config.properties {TORCHSERVE_HOME}/config.properties",
        f"WORKDIR {TORCHSERVE_HOME}",
        f"USER {SERVING_USER}",
        f"EXPOSE {' '.join(str(p) for p in production_ports.values())}",
        f"CMD {json.dumps(command)}",
    ]) + "\n"
    # In the image the model store is the image's own folder.
    config = config_text.replace("model_store=model-store",
                                 f"model_store={TORCHSERVE_HOME}/model-store")
    files = {f"model-store/{spec.name}.mar": mar.read_bytes(),
             "config.properties": config.encode()}
    return BuildContext(dockerfile, files, labels)
