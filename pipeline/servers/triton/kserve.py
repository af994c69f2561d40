"""KServe v2 (Triton's) inference requests and responses over HTTP.

Encoding and decoding use tritonclient's own functions, binary tensor data
included, so what we send is what Triton's clients send.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2
from tritonclient.http import InferenceServerClient, InferInput, InferRequestedOutput
from tritonclient.utils import serialize_byte_tensor

from pipeline.errors import ServerError
from pipeline.model.tensors import WIRE_DTYPES, Array, Batch, zeros
from pipeline.request_types import GrpcRequest, HttpRequest
from pipeline.servers.triton.wire_shapes import to_wire, wire_item_shape, wire_misshapen
from pipeline.spec.models import (
    DECLARED_HUGE_BYTES,
    OVERSIZED_BODY_BYTES,
    ModelSpec,
    ProbeName,
    TensorSpec,
)
from pipeline.spec.strings import is_string, normalized


def encode_infer(base_url: str, model: str, batch: Batch, declared: Sequence[TensorSpec],
                 output_names: list[str]) -> HttpRequest:
    """`batch` of the `declared` inputs, in their wire form (wire_shapes.py)."""
    dtypes = {tensor.name: tensor.dtype for tensor in declared}
    inputs = []
    for name, array in to_wire(batch, declared).items():
        tensor = InferInput(name, list(array.shape), WIRE_DTYPES[dtypes[name]])
        tensor.set_data_from_numpy(array, binary_data=True)
        inputs.append(tensor)
    outputs = [InferRequestedOutput(name, binary_data=True) for name in output_names]
    body, json_size = InferenceServerClient.generate_request_body(inputs, outputs=outputs)
    headers = {"Content-Type": "application/octet-stream"}
    if json_size is not None:
        headers["Inference-Header-Content-Length"] = str(json_size)
    return HttpRequest("POST", f"{base_url}/v2/models/{model}/infer", bytes(body), headers)


def grpc_infer(target: str, model: str, batch: Batch, declared: Sequence[TensorSpec],
               output_names: list[str]) -> GrpcRequest:
    """A ModelInfer call with raw tensor contents, serialized once; `batch` of the
    `declared` inputs, in their wire form."""
    dtypes = {tensor.name: tensor.dtype for tensor in declared}
    request = service_pb2.ModelInferRequest(model_name=model)
    for name, array in to_wire(batch, declared).items():
        request.inputs.add(name=name, datatype=WIRE_DTYPES[dtypes[name]], shape=list(array.shape))
        request.raw_input_contents.append(raw_contents(array))
    for name in output_names:
        request.outputs.add(name=name)
    return GrpcRequest(target, "/inference.GRPCInferenceService/ModelInfer",
                       request.SerializeToString())


def raw_contents(array: Array) -> bytes:
    """A tensor's raw bytes as KServe v2 carries them: BYTES elements each after a 4-byte
    little-endian length, any other dtype as its packed values."""
    if is_string(array):
        serialized = serialize_byte_tensor(normalized(array))
        return bytes(serialized.item()) if serialized.size else b""
    return np.ascontiguousarray(array).tobytes()


def decode_outputs(body: bytes, headers: Mapping[str, str]) -> dict[str, Array]:
    """The answer's output tensors; a malformed answer is the server's failure, one line."""
    try:
        header_length = headers.get("inference-header-content-length")
        result = InferenceServerClient.parse_response_body(
            body, header_length=int(header_length) if header_length else None)
        response: dict[str, Any] = result.get_response()
        return {out["name"]: normalized(np.asarray(result.as_numpy(out["name"])))
                for out in response.get("outputs", [])}
    except Exception as exc:  # any bytes can arrive here: whatever fails, the answer is bad
        raise ServerError(f"the server's answer could not be decoded: "
                          f"{type(exc).__name__}: {exc}") from None


def _json_inputs(model: ModelSpec, count: int, size: int | None, *, misshape: bool = False,
                 dtype_swap: bool = False, drop_first: bool = False) -> list[dict[str, Any]]:
    inputs = []
    for position, tensor in enumerate(model.inputs):
        if drop_first and position == 0:
            continue
        item = wire_misshapen(tensor, size) if misshape and position == 0 else \
            wire_item_shape(tensor, size)
        shape = [count, *item]
        wire = WIRE_DTYPES[tensor.dtype]
        if position == 0 and dtype_swap:
            wire = "INT32" if wire.startswith(("FP", "BOOL")) else "FP32"
        values = int(np.prod(shape))
        data: list[Any] = [False] * values if wire == "BOOL" else (
            [0.5] * values if wire.startswith("FP") else
            ["a"] * values if wire == "BYTES" else [1] * values)
        inputs.append({"name": tensor.name, "shape": shape, "datatype": wire, "data": data})
    return inputs


def probe_request(base_url: str, model_name: str, model: ModelSpec, max_batch_size: int,
                  probe: ProbeName, size: int | None = None) -> HttpRequest:
    """A plain-JSON request that declares what a broken client would (variable dimensions
    `size` long; the smallest of model.sizes when None)."""
    name = model_name
    if size is None and model.sizes is not None:
        size = model.sizes.values[0]
    if probe == "wrong_shape":
        inputs = _json_inputs(model, 1, size, misshape=True)
    elif probe == "wrong_dtype":
        inputs = _json_inputs(model, 1, size, dtype_swap=True)
    elif probe == "missing_input":
        inputs = _json_inputs(model, 1, size, drop_first=True)
    elif probe == "batch_over_max":
        inputs = _json_inputs(model, max_batch_size + 1, size)
    elif probe == "declared_huge_shape":
        # A little data under a shape that would need DECLARED_HUGE_BYTES.
        inputs = _json_inputs(model, 1, size)
        inputs[0]["shape"] = [1, DECLARED_HUGE_BYTES // 4]
    elif probe == "oversized_body":
        # One valid item in the binary form, followed by far more bytes than it declares.
        batch = {t.name: zeros(t, (1, *t.item_shape(size))) for t in model.inputs}
        valid = encode_infer(base_url, model_name, batch, model.inputs,
                             [t.name for t in model.outputs])
        return HttpRequest("POST", valid.url, valid.body + bytes(OVERSIZED_BODY_BYTES),
                           valid.headers)
    else:
        name = f"{model_name}-does-not-exist"
        inputs = _json_inputs(model, 1, size)
    return HttpRequest("POST", f"{base_url}/v2/models/{name}/infer",
                       json.dumps({"inputs": inputs}).encode(),
                       {"Content-Type": "application/json"})
