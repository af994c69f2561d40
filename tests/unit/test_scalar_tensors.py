"""A scalar per item (`shape: []`, a model taking or returning [n]): the spec takes it,
Triton's config declares it dims [1] with reshape [], and the Triton client speaks that
[n, 1] wire form while the rest of the pipeline sees [n]."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.errors import SpecError
from pipeline.model.contract import ContractCheck
from pipeline.model.tensors import Batch
from pipeline.servers.specs import load_spec
from pipeline.servers.triton.config import check_model_config, config_text, render_model_config
from pipeline.servers.triton.kserve import probe_request
from pipeline.servers.triton.wire_shapes import from_wire, to_wire, wire_dims, wire_misshapen
from pipeline.spec.models import LoadedSpec

SCALAR_IO = """  inputs:
    - {name: features, dtype: float32, shape: [16]}
    - {name: offset, dtype: float32, shape: []}
  outputs:
    - {name: scores, dtype: float32, shape: []}
"""


def scalar_spec(project: Path) -> LoadedSpec:
    spec = project / "serve.yaml"
    text = spec.read_text()
    start, end = text.index("  inputs:\n"), text.index("\nserver:")
    text = text[:start] + SCALAR_IO + text[end:]
    # Parity's samples are generated: the example's data file holds `features` only.
    spec.write_text(text.replace("    data: examples/mlp/samples.npz", "    samples: 16"))
    return load_spec(spec)


def test_the_spec_takes_a_scalar_per_item_but_not_for_strings(project: Path) -> None:
    model = scalar_spec(project).spec.model
    assert [t.shape for t in model.inputs] == [[16], []] and model.outputs[0].shape == []
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text().replace(
        "{name: offset, dtype: float32, shape: []}", "{name: offset, dtype: string, shape: []}"))
    with pytest.raises(SpecError, match="one string per item"):
        load_spec(spec)


def test_triton_declares_a_scalar_as_dims_1_reshaped_to_nothing(project: Path) -> None:
    spec = scalar_spec(project).spec
    config = render_model_config(spec, "model.pt", None)
    offset, scores = config.input[1], config.output[0]
    assert list(offset.dims) == [1] and offset.HasField("reshape") and not offset.reshape.shape
    assert list(scores.dims) == [1] and scores.HasField("reshape")
    assert [wire_dims(t) for t in spec.model.inputs] == [[16], [1]]
    text = config_text(config)
    assert check_model_config(text, spec) == []
    stripped = config_text(config).replace("  reshape {\n  }\n", "")
    assert [p for p in check_model_config(stripped, spec) if "reshape" in p] == [
        "input offset: a scalar per item needs reshape { shape: [] }",
        "output scores: a scalar per item needs reshape { shape: [] }"]


def test_the_triton_client_sends_n_by_1_and_hands_back_n(project: Path) -> None:
    model = scalar_spec(project).spec.model
    batch: Batch = {"features": np.zeros((3, 16), np.float32),
             "offset": np.arange(3, dtype=np.float32)}
    wire = to_wire(batch, model.inputs)
    assert wire["offset"].shape == (3, 1) and wire["features"].shape == (3, 16)
    answer = from_wire({"scores": np.ones((3, 1), np.float32)}, model.outputs)
    assert answer["scores"].shape == (3,)
    # Any other shape is left as served: the output contract judges it.
    wrong = from_wire({"scores": np.ones((3, 2), np.float32)}, model.outputs)
    check = ContractCheck(model.outputs)
    check.check("served", wrong, 3, "batch 1")
    assert check.describe() and "[n, 2]" in check.describe()[0]


def test_the_wrong_shape_probe_is_wrong_on_the_wire(project: Path) -> None:
    """[1] is a scalar's wire form: the probe must send something Triton refuses."""
    scalar_spec(project)
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text().replace(
        "    - {name: features, dtype: float32, shape: [16]}\n", "", 1))
    model = load_spec(spec).spec.model
    assert wire_misshapen(model.inputs[0], None) == [2]
    request = probe_request("http://127.0.0.1:1", "m", model, 32, "wrong_shape")
    assert b'"shape": [1, 2]' in request.body or b'"shape":[1,2]' in request.body
    valid = probe_request("http://127.0.0.1:1", "m", model, 32, "missing_input")
    assert valid.body
