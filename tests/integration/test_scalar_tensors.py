"""A model that takes and returns one scalar per item (`shape: []`: tensors of [n]) on real
servers: Triton serves it as dims [1] reshaped to [] (its clients send and receive
[n, 1]), TorchServe as JSON [n]; parity and the load run through both, and a model whose
output is [n, 1] where the spec declares [] is refused by its contract."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from tests.support.cli import cli, latest_record
from tests.support.specs import SHORT_RUN_ERROR_RATE, with_stages

pytestmark = pytest.mark.integration

STAGES = """
stages:
  readiness: {timeout: 180s}
  parity: {samples: 16}
  failure: {probes: [wrong_shape, wrong_dtype, missing_input, batch_over_max]}
  latency: {concurrency: 4, warmup: 500ms, duration: 2s,
            stability: {windows: 1, max_windows: 2}, verdict: {accept_inconclusive: true}}
  saturation: {enabled: false}
"""
MODEL = """import torch
from torch import nn


class Scored(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(16, 1)

    def forward(self, features: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
        return SCORE


def build() -> nn.Module:
    return Scored()
"""
SCALAR = "self.layer(features).squeeze(-1) + offset"
COLUMN = "self.layer(features) + offset.unsqueeze(-1)"   # [n, 1]: not what is declared
IO = """  inputs:
    - {name: features, dtype: float32, shape: [16]}
    - {name: offset, dtype: float32, shape: []}
  outputs:
    - {name: score, dtype: float32, shape: []}
"""
TORCHSERVE = """server:
  kind: torchserve
  runtime: process
  device: cpu
  instances: 1
  batching: {max_batch_size: 16, max_queue_delay: 5ms}
"""


def scalar_project(project: Path, kind: str, score: str) -> None:
    folder = project / "examples" / "mlp"
    (folder / "scored.py").write_text(MODEL.replace("SCORE", score))
    source = importlib.util.spec_from_file_location("scored", folder / "scored.py")
    assert source is not None and source.loader is not None
    module = importlib.util.module_from_spec(source)
    source.loader.exec_module(module)
    torch.save(module.build().state_dict(), folder / "scored.pt")
    spec = project / "serve.yaml"
    text = spec.read_text().replace(*SHORT_RUN_ERROR_RATE)
    text = text.replace("source: examples/mlp/model.pt", "source: examples/mlp/scored.pt")
    text = text.replace("format: torchscript ",
                        "entrypoint: examples/mlp/scored.py:build\n  format: eager ")
    start, end = text.index("  inputs:\n"), text.index("\nserver:")
    text = text[:start] + IO + text[end:]
    if kind == "torchserve":
        start, end = text.index("server:\n"), text.index("\nslo:")
        text = text[:start] + TORCHSERVE + text[end:]
    spec.write_text(with_stages(text, STAGES))


@pytest.mark.parametrize("kind", ["triton", "torchserve"])
def test_a_scalar_per_item_model_is_served_and_measured(project: Path, kind: str) -> None:
    scalar_project(project, kind, SCALAR)
    result = cli(["run"], project, timeout=400)
    record = latest_record(project)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    stages = {stage["name"]: stage for stage in record["stages"]}
    gates = {gate["name"]: gate for gate in stages["parity"]["gates"]}
    assert gates["parity.output_contract"]["observed"] == "score float32 [n]"
    assert gates["failure.wrong_shape"]["passed"]
    assert stages["latency"]["status"] == "passed"
    assert stages["latency"]["metrics"]["errors"] == 0


def test_an_n_by_1_output_declared_scalar_is_refused(project: Path) -> None:
    scalar_project(project, "triton", COLUMN)
    result = cli(["run", "--stages", "parity"], project, timeout=300)
    assert result.returncode == 1
    assert "parity.output_contract: score: declared float32 [n], the reference gave " \
           "float32 [n, 1]" in result.stderr
