"""The example model: a small fraud-scoring MLP (16 features -> 4 class scores)."""

from __future__ import annotations

import torch
from torch import nn


class FraudMLP(nn.Module):
    def __init__(self, features: int = 16, hidden: int = 64, classes: int = 4) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, classes),
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.layers(features), dim=-1)


def build() -> nn.Module:
    """Entrypoint for `format: eager`: an untrained module; weights come from the state_dict."""
    return FraudMLP()
