"""A TorchScript or eager model's inputs reach `forward` by name when it takes them all: two
inputs declared in another order than forward's are not swapped (the reference and the
server share this runtime, so parity alone cannot see a swap)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.model.runtime import LoadedModel

EAGER = '''
import torch


class AMinusTwoB(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a - 2 * b


def build() -> torch.nn.Module:
    return AMinusTwoB()
'''


class AMinusTwoB(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a - 2 * b


A, B = np.full((2, 4), 10.0, np.float32), np.ones((2, 4), np.float32)


@pytest.fixture(params=["scripted", "traced", "eager"])
def model(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path, str | None]:
    path = tmp_path / "model.pt"
    if request.param == "eager":
        (tmp_path / "entry.py").write_text(EAGER)
        torch.save({}, path)
        return "eager", path, f"{tmp_path / 'entry.py'}:build"
    module = torch.jit.script(AMinusTwoB()) if request.param == "scripted" else \
        torch.jit.trace(AMinusTwoB(), (torch.zeros(1), torch.zeros(1)))  # type: ignore[no-untyped-call]
    torch.jit.save(module, str(path))
    return "torchscript", path, None


def test_inputs_declared_in_another_order_are_fed_by_name(
        model: tuple[str, Path, str | None]) -> None:
    fmt, path, entrypoint = model
    loaded = LoadedModel(fmt, path, ["out"], entrypoint, input_names=["b", "a"])
    [out] = loaded([B, A])                         # spec order: b, then a
    assert np.allclose(out, A - 2 * B)             # 8, not b - 2a = -19


def test_names_forward_does_not_take_are_fed_in_spec_order(
        model: tuple[str, Path, str | None]) -> None:
    fmt, path, entrypoint = model
    [out] = LoadedModel(fmt, path, ["out"], entrypoint, input_names=["x", "y"])([A, B])
    assert np.allclose(out, A - 2 * B)


def test_some_names_forward_takes_and_some_not_is_refused(
        model: tuple[str, Path, str | None]) -> None:
    fmt, path, entrypoint = model
    with pytest.raises(ValueError, match="the model's forward takes a, b; the spec declares "
                                         "b, x, and x is not among them"):
        LoadedModel(fmt, path, ["out"], entrypoint, input_names=["b", "x"])
