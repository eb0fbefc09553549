"""A single-layer LSTM backbone (the paper's recurrent baseline)."""

import torch
from torch import nn

from primacy.backbones.base import Backbone
from primacy.errors import UsageError


class LSTMBackbone(Backbone):
    """nn.LSTM with hidden size d_model; (B, T, D) -> (B, T, D)."""

    def __init__(self, d_model: int = 64) -> None:
        super().__init__()
        if d_model < 1:
            raise UsageError(f"d_model={d_model} is invalid: it must be at least 1")
        self.d_model = d_model
        self.lstm = nn.LSTM(d_model, d_model, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lstm(x)[0]  # B T D
