"""A model that is slow on purpose: about 3 ms of single-threaded compute per item, which
batching does not make cheaper. Used where a test or benchmark needs a server that
misses its SLO before the load generator runs out of cores."""

from __future__ import annotations

import torch


# (No docstring on the class: torch.jit.script re-parses its source and trips over one.)
class SlowNet(torch.nn.Module):
    def forward(self, features: torch.Tensor) -> torch.Tensor:
        pairs = features.unsqueeze(2) * features.unsqueeze(1)
        hidden = pairs.repeat(1, 8, 8) * 0.01
        for _ in range(24):
            hidden = torch.tanh(torch.bmm(hidden, hidden))
        return hidden[:, 0, :4]
