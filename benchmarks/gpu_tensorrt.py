"""A TensorRT engine from the example's ONNX, with parity against the source model.

Uses the `tensorrt` Python module when it is importable (build and run in this
process, tensors on the GPU through torch), else `trtexec` to build the engine
only (its parity is then not checked, and the result says so). Where neither
exists the check is skipped with that reason: TensorRT is not on PyPI in a
usable form and ships with NVIDIA's images.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[Any]


NOT_HERE = ("skipped: neither the tensorrt module nor trtexec is on this machine "
            "(TensorRT ships with NVIDIA's images, not PyPI)")


@dataclass(frozen=True)
class EngineCheck:
    outcome: str  # "built" or "skipped: why" or "failed: why"
    parity_ok: bool | None
    max_abs_error: float | None = None


def available() -> str | None:
    """Which TensorRT is here ('module' or 'trtexec'), None when neither."""
    if importlib.util.find_spec("tensorrt") is not None:
        return "module"
    if shutil.which("trtexec"):
        return "trtexec"
    return None


def check(onnx: Path, reference: Any, samples: dict[str, Array], max_batch: int,
          plan: Path, atol: float, rtol: float) -> EngineCheck:
    """Build an engine for batches 1..max_batch and compare it with `reference`
    (a callable: list of arrays -> list of arrays) on `samples`."""
    (input_name, inputs), = samples.items()
    kind = available()
    if kind is None:
        return EngineCheck(NOT_HERE, None)
    try:
        if kind == "trtexec":
            _trtexec_build(onnx, plan, input_name, tuple(inputs.shape[1:]), max_batch)
            return EngineCheck("built (trtexec; parity not checked: needs the tensorrt "
                               "module)", None)
        outputs = _module_build_and_run(onnx, plan, inputs, max_batch)
    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
        return EngineCheck(f"failed: {exc}", False)
    expected = reference([inputs])[0]
    error = float(np.max(np.abs(outputs - expected)))
    within = bool(np.all(np.abs(outputs - expected) <= atol + rtol * np.abs(expected)))
    return EngineCheck(f"built (max |Δ| {error:.2e})", within, error)


def _shape(batch: int, item: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in (batch, *item))


def _trtexec_build(onnx: Path, plan: Path, name: str, item: tuple[int, ...],
                   max_batch: int) -> None:
    argv = ["trtexec", f"--onnx={onnx}", f"--saveEngine={plan}",
            f"--minShapes={name}:{_shape(1, item)}",
            f"--optShapes={name}:{_shape(max_batch, item)}",
            f"--maxShapes={name}:{_shape(max_batch, item)}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if done.returncode != 0 or not plan.is_file():
        raise RuntimeError("trtexec: " + " | ".join(done.stdout.strip().splitlines()[-3:]))


def _module_build_and_run(onnx: Path, plan: Path, samples: Array,
                          max_batch: int) -> Array:
    import tensorrt as trt  # type: ignore[import-not-found]
    import torch

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx.read_bytes()):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise RuntimeError("ONNX parse: " + "; ".join(errors))
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    name = network.get_input(0).name
    item = tuple(samples.shape[1:])
    profile.set_shape(name, (1, *item), (max_batch, *item), (max_batch, *item))
    config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError("the engine build returned nothing")
    plan.write_bytes(bytes(serialized))
    engine = trt.Runtime(logger).deserialize_cuda_engine(plan.read_bytes())
    context = engine.create_execution_context()
    outputs = []
    output_name = engine.get_tensor_name(1)
    for start in range(0, len(samples), max_batch):
        batch = torch.from_numpy(np.ascontiguousarray(samples[start:start + max_batch]))
        batch = batch.to("cuda")
        context.set_input_shape(name, tuple(batch.shape))
        result = torch.empty(tuple(context.get_tensor_shape(output_name)), device="cuda")
        context.set_tensor_address(name, batch.data_ptr())
        context.set_tensor_address(output_name, result.data_ptr())
        stream = torch.cuda.current_stream()
        if not context.execute_async_v3(stream.cuda_stream):
            raise RuntimeError("execute_async_v3 failed")
        stream.synchronize()
        outputs.append(result.cpu().numpy())
    return np.concatenate(outputs)
