"""The committed example is what its generator makes, and every format computes the same."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from pipeline.model.runtime import LoadedModel

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mlp"


def test_generator_reproduces_the_committed_weights_and_samples(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(EXAMPLE / "make_model.py"), str(tmp_path)], check=True,
                   capture_output=True)
    fresh = torch.load(tmp_path / "weights.pt", weights_only=True)
    committed = torch.load(EXAMPLE / "weights.pt", weights_only=True)
    assert fresh.keys() == committed.keys()
    for key in fresh:
        assert torch.equal(fresh[key], committed[key]), key
    with np.load(tmp_path / "samples.npz") as new, np.load(EXAMPLE / "samples.npz") as old:
        assert np.array_equal(new["features"], old["features"])


def test_torchscript_eager_and_onnx_agree() -> None:
    with np.load(EXAMPLE / "samples.npz") as samples:
        features = samples["features"][:8]
    scripted = LoadedModel("torchscript", EXAMPLE / "model.pt", ["scores"])([features])[0]
    eager = LoadedModel("eager", EXAMPLE / "weights.pt", ["scores"],
                        entrypoint=f"{EXAMPLE / 'net.py'}:build")([features])[0]
    onnx = LoadedModel("onnx", EXAMPLE / "model.onnx", ["scores"])([features])[0]
    assert scripted.shape == (8, 4) and scripted.dtype == np.float32
    np.testing.assert_allclose(eager, scripted, atol=1e-6)
    np.testing.assert_allclose(onnx, scripted, atol=1e-5)
    np.testing.assert_allclose(scripted.sum(axis=1), 1.0, atol=1e-5)


def test_an_onnx_graph_is_fed_by_the_spec_names_which_must_be_its_own() -> None:
    """Matched by position, inputs listed in another order than the graph's would be
    swapped silently (in the reference and the server alike): fed by name, and a name the
    graph does not have is refused."""
    with np.load(EXAMPLE / "samples.npz") as samples:
        features = samples["features"][:4]
    named = LoadedModel("onnx", EXAMPLE / "model.onnx", ["scores"],
                        input_names=["features"])([features])[0]
    assert named.shape == (4, 4)
    try:
        LoadedModel("onnx", EXAMPLE / "model.onnx", ["scores"], input_names=["feats"])
    except ValueError as exc:
        assert "the ONNX graph's inputs are features; the spec declares feats" in str(exc)
    else:
        raise AssertionError("a spec input the graph does not have was accepted")
