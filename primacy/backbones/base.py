"""The interface every sequence backbone implements (built-ins and plugins alike)."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import nn

from primacy.checks import positive
from primacy.errors import UsageError


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
        state_size(length): the real numbers a step-by-step reading keeps per sequence after ``length`` tokens; by
            default measured by stepping, overridden where step keeps more than the model needs (a sliding window).

    Subclasses take typed keyword arguments only, so configs can be validated, printed and saved.
    """

    d_model: int

    @abstractmethod
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, T, D), causal."""

    def dt(self) -> dict[str, torch.Tensor]:
        """Positive Δt per layer name, each (channels,); empty for models without a discretisation step."""
        return {}

    def state_size(self, length: int) -> int:
        """The real numbers (a complex one counting as two) that a step-by-step reading keeps per sequence after
        ``length`` tokens, summed over layers: by default measured on the state that ``length`` steps through zero
        inputs leave from ``initial_state(1)``, without gradients and as in evaluation mode. Integer tensors in the
        state (position counters) are bookkeeping, not memory, and do not count."""
        positive(length=length)
        if not (callable(getattr(self, "initial_state", None)) and callable(getattr(self, "step", None))):
            raise UsageError(f"{type(self).__name__} has no step() to measure a state with: it keeps no recurrent "
                             "state to count")
        like = next(self.parameters(), torch.empty(0))
        x_t = torch.zeros(1, self.d_model, dtype=like.dtype, device=like.device)  # 1 D
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                state = self.initial_state(1)
                for _ in range(length):
                    _, state = self.step(x_t, state)
        finally:
            self.train(was_training)
        return count_floats(state)


def count_floats(state: object) -> int:
    """The real numbers in a state: a tensor's elements if it is floating point, twice them if complex, none if
    integer or boolean; summed through nested tuples, lists and dicts (values); anything else (None) counts none."""
    if isinstance(state, torch.Tensor):
        if state.is_complex():
            return 2 * state.numel()
        return state.numel() if state.is_floating_point() else 0
    if isinstance(state, dict):
        return sum(count_floats(value) for value in state.values())
    if isinstance(state, (tuple, list)):
        return sum(count_floats(item) for item in state)
    return 0
