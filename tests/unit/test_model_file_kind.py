"""A model file that is not of its declared format is refused before anything starts."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from pipeline.model.file_kind import format_problem

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "mlp"


def test_the_bundled_models_are_what_they_say() -> None:
    assert format_problem(EXAMPLES / "model.pt", "torchscript") is None
    assert format_problem(EXAMPLES / "weights.pt", "eager") is None
    assert format_problem(EXAMPLES / "model.onnx", "onnx") is None


@pytest.mark.parametrize("path, declared, says", [
    ("weights.pt", "torchscript", "a torch.save file (weights or a pickled module), not "
                                  "TorchScript"),
    ("model.pt", "eager", "a TorchScript file, not a torch.save one"),
    ("model.pt", "onnx", "a PyTorch file (a zip archive), not ONNX"),
    ("model.onnx", "torchscript", "not a TorchScript file"),
])
def test_a_file_of_another_format_is_named(path: str, declared: str, says: str) -> None:
    problem = format_problem(EXAMPLES / path, declared)
    assert problem is not None and problem.startswith(says)


def test_text_and_empty_files_say_what_they_are(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# my model\nweights are elsewhere\n")
    assert format_problem(readme, "onnx") == (
        "not an ONNX model (a protobuf that begins with its ir_version), and it is text "
        "('# my model\\nweights are e'…)")
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    assert format_problem(empty, "torchscript") == (
        "not a TorchScript file: torch.jit.save writes a zip archive, and it is empty")


def test_a_legacy_pickle_is_an_eager_file(tmp_path: Path) -> None:
    legacy = tmp_path / "legacy.pt"
    torch.save({"w": torch.zeros(2)}, legacy, _use_new_zipfile_serialization=False)
    assert format_problem(legacy, "eager") is None
    plain = tmp_path / "plain.pkl"
    plain.write_bytes(pickle.dumps({"w": [0.0]}))
    assert format_problem(plain, "eager") is None
