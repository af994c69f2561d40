"""Deliberately bad eager models for tests: each one wrong in exactly one way.

`write_bad_model(folder, kind)` writes `<kind>.py` (the entrypoint) and
`<kind>.pt` (its state_dict) into `folder`, the spec's folder; `bad_model_spec`
points a spec text at them. The models are a 16 -> 4 linear layer like the example's inputs and
outputs, so the example's samples and gates apply unchanged.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

BadModel = Literal["raising", "wrong_dtype", "noisy", "refuses_zeros"]

FORWARDS: dict[BadModel, str] = {
    # Every 50th execution raises: 2% of the batches the server forms, in every worker.
    "raising": (
        "        self.calls += 1\n"
        "        if self.calls % 50 == 0:\n"
        "            raise RuntimeError(f'execution {self.calls} failed on purpose')\n"
        "        return torch.softmax(self.linear(x), dim=-1)\n"),
    # float64 scores where the spec says float32.
    "wrong_dtype": "        return torch.softmax(self.linear(x), dim=-1).double()\n",
    # Noise far above parity's tolerance: the same inputs never give the same outputs.
    "noisy": ("        noise = 1e-3 * torch.rand(x.shape[0], 4)\n"
              "        return torch.softmax(self.linear(x), dim=-1) + noise\n"),
    # Not bad for real inputs: it only refuses an item of all zeros (a padding row, say),
    # which TorchServe's handler warms up on.
    "refuses_zeros": (
        "        if bool((x == 0).all(dim=-1).any()):\n"
        "            raise RuntimeError('an all-zero item')\n"
        "        return torch.softmax(self.linear(x), dim=-1)\n"),
}

TEMPLATE = """import torch


class BadModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 4)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
{forward}

def build() -> torch.nn.Module:
    return BadModel()
"""


def write_bad_model(folder: Path, kind: BadModel) -> tuple[Path, Path]:
    """(entrypoint file, weights file) of the bad model `kind` in `folder`."""
    import torch

    entrypoint = folder / f"{kind}.py"
    entrypoint.write_text(TEMPLATE.format(forward=FORWARDS[kind]))
    weights = folder / f"{kind}.pt"
    torch.manual_seed(0)
    linear = torch.nn.Linear(16, 4).state_dict()
    torch.save({f"linear.{key}": value for key, value in linear.items()}, weights)
    return entrypoint, weights


def bad_model_spec(spec_text: str, kind: BadModel) -> str:
    """`spec_text` (the example's or a variant) serving the bad model written next to it."""
    served = re.sub(r"(?m)^  source: \S+", f"  source: {kind}.pt", spec_text, count=1)
    return served.replace("format: torchscript", f"format: eager\n  entrypoint: {kind}.py:build")
