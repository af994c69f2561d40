"""Regenerate the two-input example model (float32 features and an int64 category) and
its representative inputs, deterministically.

    python examples/two_inputs/make_model.py [OUTPUT_DIR]

Writes model.pt (TorchScript) and samples.npz (64 inputs) into OUTPUT_DIR (default:
this folder).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

SEED = 20261130
CATEGORIES = 100


class ScoredByCategory(nn.Module):
    """Scores from numeric features plus a learned embedding of a category id."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(CATEGORIES, 8)
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))

    def forward(self, features: torch.Tensor, category: torch.Tensor) -> torch.Tensor:
        embedded = self.embedding(category[:, 0])
        return self.body(torch.cat([features, embedded], dim=1))


def make(output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    scripted = torch.jit.script(ScoredByCategory().eval())
    torch.jit.save(scripted, str(output / "model.pt"))
    rng = np.random.default_rng(SEED)
    np.savez(output / "samples.npz",
             features=rng.normal(0.0, 1.0, size=(64, 8)).astype(np.float32),
             category=rng.integers(0, CATEGORIES, size=(64, 1)).astype(np.int64))


if __name__ == "__main__":
    make(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
