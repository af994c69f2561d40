"""The one line a user reads for a model's error: the cause kept, wherever it was printed."""

from __future__ import annotations

import pytest

from pipeline.model.reference import one_line
from pipeline.servers.torchserve.server import _TELLING

TORCHSCRIPT_ERROR = (
    "The following operation failed in the TorchScript interpreter.\n"
    "Traceback of TorchScript, serialized code (most recent call last):\n"
    + "".join(f'  File "code/__torch__/torch/nn/modules/sparse.py", line {n}, in forward\n'
              f"    _0 = torch.embedding(weight, input, -1, False, False)\n" for n in range(30))
    + "RuntimeError: index out of range in self\n")


def test_a_long_torchscript_error_keeps_its_last_line() -> None:
    text = one_line(TORCHSCRIPT_ERROR)
    assert len(text) <= 300 and text.endswith("… RuntimeError: index out of range in self")
    assert text.startswith("The following operation failed in the TorchScript interpreter.")


def test_a_short_error_is_left_whole_on_one_line() -> None:
    assert one_line("bad value\n  for x") == "bad value for x"
    assert one_line("x" * 400).endswith("…") and len(one_line("x" * 400)) == 300


@pytest.mark.parametrize(("line", "quoted"), [
    ("2026-12-07T02:31:00,123 [INFO ] W-9000-m_1.0-stdout MODEL_LOG - "
     "builtins.RuntimeError: an all-zero item", "builtins.RuntimeError: an all-zero item"),
    ("... MODEL_LOG - onnxruntime.capi.onnxruntime_pybind11_state.InvalidProtobuf: "
     "[ONNXRuntimeError] : 7 : INVALID_PROTOBUF",
     "onnxruntime.capi.onnxruntime_pybind11_state.InvalidProtobuf: [ONNXRuntimeError] : 7 : "
     "INVALID_PROTOBUF"),
    ("... MODEL_LOG - ValueError: the model returned 2 outputs",
     "ValueError: the model returned 2 outputs"),
    ("... MODEL_LOG - Python runtime: 3.11.7", None),
    ("... MODEL_LOG - Listening on port: /tmp/.ts.sock.9000", None),
])
def test_torchserve_quotes_the_model_exception_from_its_log(line: str,
                                                            quoted: str | None) -> None:
    found = [m.group(0) for pattern in _TELLING for m in pattern.finditer(line)]
    assert found == ([quoted] if quoted else [])
