"""The one residual block every stack of mixers is built from (the Transformer, the hybrid, the matrix-memory family):
a pre-norm residual around the token mixer, then around a GELU MLP.

Legend: B batch, T time, D model width.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

Norm = Literal["layer", "rms", "none"]


def norm_layer(kind: Norm, d_model: int) -> nn.Module:
    """A norm of width D: ``layer`` LayerNorm (PyTorch's eps), ``rms`` RMSNorm with eps 1e-6, ``none`` the identity."""
    if kind == "layer":
        return nn.LayerNorm(d_model)
    if kind == "rms":
        return nn.RMSNorm(d_model, eps=1e-6)
    return nn.Identity()


@dataclass(frozen=True)
class Parts:
    """What a stack's checkpoints call a block's parts and the order the block registers them in: the state_dict's
    keys, and the parameters' order, by which an optimiser's saved state is matched to them on resume. A new stack
    keeps the default; the stacks that came before the shared block name theirs so their checkpoints still load.

    norm: the first norm's name (the second is always ``norm2``, the MLP ``mlp``).
    mixer: the mixer's name.
    norms_first: register the second norm before the mixer (the Transformer's blocks), not after it.
    spare_norm: build the second norm even without an MLP, which then never uses it (the Transformer's blocks: their
        checkpoints with ``layer_norm`` and without ``mlp`` hold its weights).
    """

    norm: str = "norm1"
    mixer: str = "mixer"
    norms_first: bool = False
    spare_norm: bool = False


NEW = Parts()


class Block(nn.Module):
    """Pre-norm residual block:

        x = x + Dropout(mixer(norm1(x)))
        x = x + MLP(norm2(x))          MLP = Linear(D, d_ff), GELU, Linear(d_ff, D), Dropout; only with d_ff

    Args:
        d_model: width D.
        mixer: the token mixer, (B, T, D) -> (B, T, D); for ``step``, ``mixer.step(x_t, state) -> (y_t, state)``.
        norm: the kind of both norms (``norm_layer``).
        d_ff: the MLP's width; None: no MLP.
        dropout: on the mixer's output and on the MLP's.
        parts: the names and order of the parts (``Parts``).
    """

    def __init__(self, d_model: int, mixer: nn.Module, norm: Norm = "rms", d_ff: int | None = None,
                 dropout: float = 0.0, parts: Parts = NEW) -> None:
        super().__init__()
        self.parts = parts
        # setattr, not add_module, which refuses a name the class answers for (the mixer property)
        setattr(self, parts.norm, norm_layer(norm, d_model))
        second = norm_layer(norm, d_model) if d_ff is not None or parts.spare_norm else None
        if parts.norms_first:
            self.norm2 = second
        setattr(self, parts.mixer, mixer)
        if not parts.norms_first:
            self.norm2 = second
        self.mlp = (nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model), nn.Dropout(dropout))
                    if d_ff is not None else None)
        self.drop = nn.Dropout(dropout)

    @property
    def pre_norm(self) -> nn.Module:
        """The norm before the mixer (``parts.norm``)."""
        return self._modules[self.parts.norm]

    @property
    def mixer(self) -> nn.Module:
        """The token mixer (``parts.mixer``)."""
        return self._modules[self.parts.mixer]

    def _feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.mlp is None else x + self.mlp(self.norm2(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.mixer(self.pre_norm(x)))  # B T D
        return self._feed_forward(x)

    def step(self, x_t: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """forward for the next position alone, x_t (B, D) -> (B, D), with the mixer's state (a recurrence or a
        cache)."""
        y_t, state = self.mixer.step(self.pre_norm(x_t), state)
        return self._feed_forward(x_t + self.drop(y_t)), state


def step_blocks(blocks: Iterable[nn.Module], x_t: torch.Tensor, states: Iterable[Any]) -> tuple[torch.Tensor, list]:
    """A stack's blocks (or layers with ``step``) one position on: x_t (B, D) through each block's ``step`` with its
    state, in order; returns the last output (B, D) and the blocks' new states."""
    new = []
    for block, state in zip(blocks, states):
        x_t, state = block.step(x_t, state)
        new.append(state)
    return x_t, new
