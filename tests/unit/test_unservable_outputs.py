"""A model that returns bfloat16 is told so, as a dtype nothing here can carry, not as a
model that raised."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.model.reference import ReferenceFailed, expected_outputs
from pipeline.model.runtime import LoadedModel
from stages.parity import reference_failure


class ReturnsBfloat16(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.bfloat16)


def test_a_bfloat16_output_names_the_dtype_and_the_fix(tmp_path: Path) -> None:
    torch.jit.save(torch.jit.script(ReturnsBfloat16()), str(tmp_path / "m.pt"))
    model = LoadedModel("torchscript", tmp_path / "m.pt", ["scores"])
    with pytest.raises(ReferenceFailed) as caught:
        expected_outputs(model, [np.zeros((2, 4), np.float32)], "sample batch 1 of 3")
    assert not caught.value.raised
    assert str(caught.value).startswith("on sample batch 1 of 3, the model returns bfloat16 "
                                        "for output scores")
    assert "`.float()`" in str(caught.value)
    result = reference_failure(caught.value, generated=False)
    assert str(result.gates[0].observed).startswith("the model returns bfloat16")
    assert "raised" not in result.message
