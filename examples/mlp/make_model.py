"""Regenerate the example model and its representative inputs, deterministically.

    python examples/mlp/make_model.py [OUTPUT_DIR]

Writes model.pt (TorchScript), weights.pt (state_dict for `format: eager`),
model.onnx (for `format: onnx`, only when onnxscript is installed) and
samples.npz (64 representative inputs) into OUTPUT_DIR (default: this folder).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from net import FraudMLP

SEED = 20261129


def make(output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    model = FraudMLP().eval()
    torch.save(model.state_dict(), output / "weights.pt")
    scripted = torch.jit.script(model)
    torch.jit.save(scripted, str(output / "model.pt"))
    rng = np.random.default_rng(SEED)
    features = rng.normal(0.0, 1.0, size=(64, 16)).astype(np.float32)
    np.savez(output / "samples.npz", features=features)
    try:
        import onnxscript  # noqa: F401
    except ImportError:
        return
    torch.onnx.export(
        model, (torch.from_numpy(features[:2]),), str(output / "model.onnx"),
        input_names=["features"], output_names=["scores"],
        dynamic_shapes={"features": {0: torch.export.Dim("batch", min=1, max=4096)}},
        external_data=False,
    )


if __name__ == "__main__":
    make(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
