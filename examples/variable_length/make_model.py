"""Regenerate the variable-length example model and its data file, deterministically.

    python examples/variable_length/make_model.py [OUTPUT_DIR]

Writes model.pt (TorchScript: a linear layer over every row of a sequence, summed over the
sequence, so its cost grows with the length) and requests.jsonl (48 requests of 4 to 96
rows, one a line) into OUTPUT_DIR (default: this folder).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

SEED = 20261202
FEATURES = 8
LENGTHS = (4, 16, 96)


class SequenceSum(nn.Module):
    """Scores of a sequence of feature rows: each row through a linear layer, summed."""

    def __init__(self) -> None:
        super().__init__()
        self.rows = nn.Linear(FEATURES, 4)

    def forward(self, sequence: torch.Tensor) -> torch.Tensor:
        return self.rows(sequence).sum(dim=1)


def make(output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    scripted = torch.jit.script(SequenceSum().eval())
    torch.jit.save(scripted, str(output / "model.pt"))
    rng = np.random.default_rng(SEED)
    with (output / "requests.jsonl").open("w") as lines:
        for index in range(48):
            length = LENGTHS[index % len(LENGTHS)]
            rows = np.round(rng.normal(0.0, 1.0, size=(length, FEATURES)), 3)
            lines.write(json.dumps({"sequence": rows.tolist()}) + "\n")


if __name__ == "__main__":
    make(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
