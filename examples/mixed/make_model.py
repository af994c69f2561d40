"""A second example for `compare`: two inputs of different dtypes (float32 features and
int64 category ids), deterministically.

    python examples/mixed/make_model.py [OUTPUT_DIR]

Writes model.pt (TorchScript) and samples.npz (64 representative inputs).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

SEED = 20261130
CATEGORIES = 100


# (No docstring on the class: torch.jit.script re-parses its source and trips over one.)
class MixedNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(CATEGORIES, 8)
        self.dense = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, features: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        joined = torch.relu(self.dense(features)) + self.embedding(ids).mean(dim=1)
        return torch.softmax(self.head(joined), dim=1)


def make(output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    torch.jit.save(torch.jit.script(MixedNet().eval()), str(output / "model.pt"))
    rng = np.random.default_rng(SEED)
    np.savez(output / "samples.npz",
             features=rng.normal(0.0, 1.0, size=(64, 8)).astype(np.float32),
             ids=rng.integers(0, CATEGORIES, size=(64, 4)).astype(np.int64))


if __name__ == "__main__":
    make(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
