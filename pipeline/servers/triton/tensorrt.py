"""TensorRT engines for Triton's tensorrt backend: built with trtexec on a GPU runner.

The engine is built inside the serving image's base (NVIDIA's Triton image has
trtexec) with the GPUs attached. Everything up to that call is plain code and
tested on CPU; without a GPU the build stage says so instead of pretending.
"""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.servers.docker.engine import DockerEngine
from pipeline.spec.models import Spec


def shape_arg(spec: Spec, batch: int) -> str:
    return ",".join(f"{t.name}:{'x'.join(str(d) for d in (batch, *t.shape))}"
                    for t in spec.model.inputs)


def trtexec_argv(spec: Spec, onnx: str, plan: str) -> list[str]:
    """Dynamic batch from 1 to max_batch_size, optimised for the largest preferred size."""
    batching = spec.server.batching
    optimal = max(batching.preferred_batch_sizes or [batching.max_batch_size])
    return ["trtexec", f"--onnx={onnx}", f"--saveEngine={plan}",
            f"--minShapes={shape_arg(spec, 1)}", f"--optShapes={shape_arg(spec, optimal)}",
            f"--maxShapes={shape_arg(spec, batching.max_batch_size)}"]


def build_engine(engine: DockerEngine, spec: Spec, onnx: Path, folder: Path,
                 timeout_s: float = 1800.0) -> Path:
    """Run trtexec in the base image on the GPUs; the engine file, or a clear error."""
    base = spec.server.image.base if spec.server.image is not None else None
    if base is None:
        raise PipelineError("backend tensorrt needs server.image.base (an image with trtexec)")
    if not engine.has_gpus():
        raise PipelineError("backend tensorrt: TensorRT engines are built on the GPU they "
                            "run on, and this Docker host has none (no nvidia runtime): run "
                            "the pipeline on the GPU runner")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(onnx.read_bytes())
    engine.ensure_base(base)
    trtexec = engine.container(
        base, ports={}, shm_size="1g", memory_limit=None, gpus=True,
        command=trtexec_argv(spec, "/work/model.onnx", "/work/model.plan"),
        log_path=folder / "trtexec.log", name=f"trtexec-{time.time_ns()}",
        volumes={str(folder): "/work"})
    with trtexec as container:
        deadline = time.monotonic() + timeout_s
        while container.is_running() and time.monotonic() < deadline:
            time.sleep(1.0)
        outcome = container.describe_exit()
    plan = folder / "model.plan"
    if outcome != "exited with code 0" or not plan.is_file():
        tail = " | ".join(container.log_tail(4))
        raise PipelineError(f"trtexec {outcome}: {tail}")
    return plan
