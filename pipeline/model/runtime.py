"""Load and run a model file: the one runtime shared by the reference and the server.

The pipeline's parity reference and the Triton python-backend `model.py` both
use this module (it is copied into the model repository), so it imports only
numpy, torch and onnxruntime and nothing from `pipeline`.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[Any]


class LoadedModel:
    """A model that maps input arrays (spec order) to output arrays (spec order)."""

    def __init__(self, fmt: str, model_path: Path, output_names: Sequence[str],
                 entrypoint: str | None = None, trusted: bool = False,
                 device: str = "cpu", threads: int | None = None,
                 input_names: Sequence[str] | None = None) -> None:
        self.format = fmt
        self.output_names = list(output_names)
        self.device = device
        self._run: Callable[[list[Array]], list[Array]]
        if fmt == "onnx":
            self._run = _onnx_runner(model_path, self.output_names, device, threads,
                                     input_names)
        elif fmt in ("torchscript", "eager"):
            self._run = _torch_runner(fmt, model_path, self.output_names, entrypoint, trusted,
                                      device, threads, input_names)
        else:
            raise ValueError(f"unknown model format {fmt!r}")

    def __call__(self, inputs: list[Array]) -> list[Array]:
        outputs = self._run(inputs)
        if len(outputs) != len(self.output_names):
            raise ValueError(f"the model returned {len(outputs)} outputs, the spec names "
                             f"{len(self.output_names)}: {', '.join(self.output_names)}")
        return outputs


def _onnx_runner(model_path: Path, output_names: list[str], device: str,
                 threads: int | None, spec_inputs: Sequence[str] | None
                 ) -> Callable[[list[Array]], list[Array]]:
    """Inputs are fed by the spec's names (`spec_inputs`, spec order), which must be the
    graph's: matched by position, two inputs listed in another order would be swapped
    silently, in the reference and the server alike."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    providers = ["CUDAExecutionProvider"] if device.startswith("cuda") else []
    session = onnxruntime.InferenceSession(str(model_path), options,
                                           providers=[*providers, "CPUExecutionProvider"])
    input_names = [node.name for node in session.get_inputs()]
    if spec_inputs is not None:
        if sorted(spec_inputs) != sorted(input_names):
            raise ValueError(f"the ONNX graph's inputs are {', '.join(input_names)}; the spec "
                             f"declares {', '.join(spec_inputs)} (model.inputs names must be "
                             "the graph's)")
        input_names = list(spec_inputs)

    def run(inputs: list[Array]) -> list[Array]:
        feeds = dict(zip(input_names, inputs, strict=True))
        return [np.asarray(out) for out in session.run(output_names, feeds)]

    return run


def _torch_runner(fmt: str, model_path: Path, output_names: list[str], entrypoint: str | None,
                  trusted: bool, device: str, threads: int | None,
                  spec_inputs: Sequence[str] | None = None
                  ) -> Callable[[list[Array]], list[Array]]:
    import torch

    if threads:
        torch.set_num_threads(threads)
    if fmt == "torchscript":
        module = torch.jit.load(  # type: ignore[no-untyped-call]
            str(model_path), map_location=device)
    else:
        if entrypoint is None:
            raise ValueError("format eager needs an entrypoint 'file.py:callable'")
        module = _build_eager(entrypoint)
        state = torch.load(str(model_path), map_location=device, weights_only=not trusted)
        module.load_state_dict(state)
        module.to(device)
    module.eval()
    keywords = _keyword_inputs(_forward_arguments(module), spec_inputs)

    def run(inputs: list[Array]) -> list[Array]:
        arguments = [_texts(a) if a.dtype.char in "OSU" else
                     torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in inputs]
        with torch.inference_mode():
            if keywords is None:
                result = module(*arguments)
            else:
                result = module(**dict(zip(keywords, arguments, strict=True)))
        if isinstance(result, dict):
            result = [result[name] for name in output_names]
        elif isinstance(result, torch.Tensor) or _is_texts(result):
            result = [result]
        return [_text_array(r) if _is_texts(r) else _tensor_array(r, name)
                for r, name in zip(result, [*output_names, *[None] * len(result)],
                                   strict=False)]

    return run


class UnservableOutput(TypeError):
    """The model returned a tensor of a dtype numpy cannot hold: not an error of the model,
    but neither the reference nor the servers' wire encoders can carry it."""


def _tensor_array(tensor: Any, name: str | None) -> Array:
    import torch

    if tensor.dtype in (torch.bfloat16, torch.complex32) or \
            str(tensor.dtype).startswith("torch.float8"):
        dtype = str(tensor.dtype).removeprefix("torch.")
        raise UnservableOutput(
            f"the model returns {dtype} for output {name or '?'}, which numpy (and so the "
            "parity reference and the servers' wire encoders) cannot hold; return float32 "
            "or float16 from the model (`.float()` or `.half()` on that output)")
    array: Array = tensor.detach().to("cpu").numpy()
    return array


def _forward_arguments(module: Any) -> list[str] | None:
    """The names `forward` takes, self left out; None where they cannot be known (a
    forward of *args)."""
    import inspect

    schema = getattr(getattr(module, "forward", None), "schema", None)
    if schema is not None:        # TorchScript, scripted or traced: its schema keeps them
        return [argument.name for argument in schema.arguments][1:]
    parameters = inspect.signature(module.forward).parameters.values()
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
        return None
    return [p.name for p in parameters]


def _keyword_inputs(forward: list[str] | None, spec_inputs: Sequence[str] | None
                    ) -> list[str] | None:
    """How the spec's inputs reach `forward`: by name (returned, spec order) when forward
    takes every one of them, in any order; by position (None) when it takes none of them
    by name (the spec's names are then only the wire's, as Triton's PyTorch backend does
    with INPUT__0 names). Some but not all is a spec error: matched by position, two
    inputs in another order than forward's would be swapped silently, in the reference
    and the server alike."""
    if spec_inputs is None or forward is None:
        return None
    named = [name for name in spec_inputs if name in forward]
    if not named:
        return None
    if len(named) != len(spec_inputs):
        unknown = [name for name in spec_inputs if name not in forward]
        raise ValueError(f"the model's forward takes {', '.join(forward)}; the spec declares "
                         f"{', '.join(spec_inputs)}, and {', '.join(unknown)} is not among them "
                         "(model.inputs names must be forward's argument names, or none of "
                         "them: then they are fed in the spec's order)")
    return list(spec_inputs)


def _texts(array: Array) -> list[str]:
    """A string tensor of one string per item (`[n, 1]`) as the model takes it: a List[str]
    of n strings."""
    return [e.decode("utf-8") if isinstance(e, bytes) else str(e)
            for e in array.reshape(-1).tolist()]


def _is_texts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(e, str) for e in value)


def _text_array(values: list[str]) -> Array:
    """A model's List[str] of one string per item as a string tensor `[n, 1]` of bytes."""
    array = np.empty((len(values), 1), dtype=np.object_)
    array[:, 0] = [value.encode("utf-8") for value in values]
    return array


def _build_eager(entrypoint: str) -> Any:
    file_part, _, attribute = entrypoint.rpartition(":")
    path = Path(file_part)
    module_name = f"_serve_pipeline_entry_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import entrypoint file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise ValueError(f"{path} has no callable '{attribute}'")
    return factory()
