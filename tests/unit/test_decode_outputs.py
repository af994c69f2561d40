"""A malformed answer from the server is a one-line server failure, never a traceback."""

from __future__ import annotations

import json

import pytest

from pipeline.errors import ServerError
from pipeline.servers.triton import kserve


@pytest.mark.parametrize("body, headers", [
    (b"\x00\xffnot json", {}),
    (json.dumps({"outputs": [{"name": "scores", "datatype": "FP32", "shape": [1, 4],
                              "data": []}]}).encode(), {}),
    (b'{"outputs": [{"name": "scores", "datatype": "FP32", "shape": [1, 4], '
     b'"parameters": {"binary_data_size": 16}}]}' + b"\x00" * 3,
     {"inference-header-content-length": "110"}),
])
def test_a_malformed_answer_is_a_server_error(body: bytes, headers: dict[str, str]) -> None:
    with pytest.raises(ServerError, match="could not be decoded"):
        kserve.decode_outputs(body, headers)


def test_a_wellformed_answer_decodes() -> None:
    body = json.dumps({"outputs": [{"name": "scores", "datatype": "FP32", "shape": [1, 2],
                                    "data": [0.5, 1.5]}]}).encode()
    outputs = kserve.decode_outputs(body, {})
    assert outputs["scores"].tolist() == [[0.5, 1.5]]
