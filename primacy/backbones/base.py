"""The interface every sequence backbone implements (built-ins and plugins alike)."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import nn


class Backbone(nn.Module, ABC):
    """A causal sequence-to-sequence map of fixed width.

    Required:
        d_model: the width D of inputs and outputs.
        forward(x): (B, T, D) -> (B, T, D); output t depends on inputs 0..t only.
    Optional:
        dt(): the positive discretisation steps by layer name (each a (channels,) tensor); empty if none.
        step(x_t, state): one recurrent step, (B, D) -> (B, D), for backbones with a recurrent form.

    Subclasses take typed keyword arguments only, so configs can be validated, printed and saved.
    """

    d_model: int

    @abstractmethod
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, T, D), causal."""

    def dt(self) -> dict[str, torch.Tensor]:
        """Positive Δt per layer name, each (channels,); empty for models without a discretisation step."""
        return {}
