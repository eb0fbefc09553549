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
        dt_per_token(x) -> {layer name: (B, T, channels)}: for a backbone whose step depends on the input (Mamba's
            selection), the step each position of x (B, T, D) takes, without gradients; the names are dt()'s.
        initial_state(batch_size) and step(x_t, state) -> (y_t, state): one position at a time (a recurrence, or
            a cache of the past), x_t and y_t (B, D); stepping from the initial state through x[:, t] must give
            forward(x)[:, t]. Models that feed their outputs back (free recall) then take one step per output
            instead of a pass over the whole sequence.
        influence(x) -> list[Influence]: only for a backbone whose mixing has an exact linear form (S4, S4D, the
            Transformer, Mamba, xLSTM's mLSTM blocks; not the LSTM or sLSTM, and never an approximation): for inputs
            x (B, T, D), one ``primacy.backbones.influence.Influence`` per mixing layer, in layer order, without
            gradients and as in evaluation mode (no dropout): weights (B, C, T, T), zero above the diagonal, and the
            values they mix, so that Σ_s weights[b, c, t, s] · values[b, c, s] is the layer's mixing output on the
            layer's input as forward computes it.
        ablate(units) -> a context manager, with influence: while open, each (layer, unit) pair (0-based: the index
            into influence's list and into its C units) contributes nothing to what follows its layer, in forward
            and step: its mixing output is zero, as if its values were. Blocks nest and restore what was ablated
            before on exit; a pair out of range is a UsageError (``primacy.backbones.influence.ablating`` does all
            of this for layers that keep an ``ablated`` set).

    Subclasses take typed keyword arguments only, so configs can be validated, printed and saved.
    """

    d_model: int

    @abstractmethod
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, T, D), causal."""

    def dt(self) -> dict[str, torch.Tensor]:
        """Positive Δt per layer name, each (channels,); empty for models without a discretisation step."""
        return {}
