"""KServe v2 inference requests and responses over HTTP, with binary tensor data.

Encoding and decoding are tritonclient's own, so what we send is what Triton's
clients send.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.http import InferenceServerClient, InferInput, InferRequestedOutput

from pipeline.tensors import WIRE_DTYPES, Array, Batch


@dataclass(frozen=True)
class EncodedRequest:
    path: str
    body: bytes
    headers: dict[str, str]


def encode_infer(model: str, batch: Batch, dtypes: Mapping[str, str],
                 output_names: list[str]) -> EncodedRequest:
    inputs = []
    for name, array in batch.items():
        tensor = InferInput(name, list(array.shape), WIRE_DTYPES[dtypes[name]])
        tensor.set_data_from_numpy(array, binary_data=True)
        inputs.append(tensor)
    outputs = [InferRequestedOutput(name, binary_data=True) for name in output_names]
    body, json_size = InferenceServerClient.generate_request_body(inputs, outputs=outputs)
    headers = {"Content-Type": "application/octet-stream"}
    if json_size is not None:
        headers["Inference-Header-Content-Length"] = str(json_size)
    return EncodedRequest(f"/v2/models/{model}/infer", bytes(body), headers)


def decode_outputs(body: bytes, headers: dict[str, str]) -> dict[str, Array]:
    header_length = headers.get("inference-header-content-length")
    result = InferenceServerClient.parse_response_body(
        body, header_length=int(header_length) if header_length else None)
    response: dict[str, Any] = result.get_response()
    return {out["name"]: np.asarray(result.as_numpy(out["name"]))
            for out in response.get("outputs", [])}


def json_request(model: str, inputs: list[dict[str, Any]]) -> EncodedRequest:
    """A plain-JSON request, for failure probes that declare things a real client would not."""
    import json

    body = json.dumps({"inputs": inputs}).encode()
    return EncodedRequest(f"/v2/models/{model}/infer", body,
                          {"Content-Type": "application/json"})
