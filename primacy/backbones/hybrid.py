"""A hybrid of a state-space model and local attention (as Jamba and Griffin interleave them): S4D layers, which
keep a compressed trace of the whole past, and sliding-window attention layers, which see the last few positions
exactly. ``pattern`` says which layer comes where; the window trades how much of the recent past is kept verbatim.

Each layer is a pre-norm residual block (``primacy.backbones.block``), x + Layer(RMSNorm(x)); attention blocks add a
GELU MLP with ``mlp``. The attention has no positional encoding of its own (as in Jamba): position reaches it through
the SSM layers before it.

Legend: B batch, T time, D model width.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Literal

import torch
from torch import nn

from primacy.backbones.base import Backbone, count_floats
from primacy.backbones.block import Block, Parts, norm_layer, step_blocks
from primacy.backbones.influence import Influence, ablating, unit_pair
from primacy.backbones.s4d import S4DBackbone
from primacy.backbones.transformer import CausalSelfAttention
from primacy.checks import one_of, positive
from primacy.errors import UsageError

Layer = Literal["ssm", "attention"]
_LAYERS = ("ssm", "attention")
# The attention layers' blocks as the hybrid's checkpoints hold them: the Transformer's names and order, but no second
# norm without an MLP.
WINDOW_PARTS = Parts(mixer="attn", norms_first=True)


class SSMLayer(Block):
    """x + S4D(RMSNorm(x)): one S4D block (LegS, its own output GLU) in a pre-norm residual, no MLP; its parts are
    ``norm`` and ``ssm``, as the hybrid's checkpoints name them."""

    def __init__(self, d_model: int, d_state: int) -> None:
        super().__init__(d_model, S4DBackbone(d_model=d_model, d_state=d_state), "rms", parts=Parts("norm", "ssm"))

    def initial_state(self, batch_size: int) -> torch.Tensor:
        return self.mixer.initial_state(batch_size)

    def influence(self, x: torch.Tensor) -> Influence:
        return self.mixer.influence(self.pre_norm(x))[0]

    def units(self) -> int:
        return self.mixer.d_model

    def ablate(self, units: list[int]) -> AbstractContextManager[None]:
        return self.mixer.ablate([(0, unit) for unit in units])


class WindowLayer(nn.Module):
    """x + SlidingWindowAttention(RMSNorm(x)) (then x + MLP(RMSNorm(x))): a Transformer's block with a window and
    RMSNorms, held as ``block`` (as the hybrid's checkpoints name it)."""

    def __init__(self, d_model: int, n_heads: int, window: int, mlp: bool, d_ff: int | None) -> None:
        super().__init__()
        attention = CausalSelfAttention(d_model, n_heads, 0.0, window)
        self.block = Block(d_model, attention, "rms", (d_ff or 4 * d_model) if mlp else None, parts=WINDOW_PARTS)
        self.n_heads = n_heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)

    def step(self, x_t: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
             ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        return self.block.step(x_t, state)

    def initial_state(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.block.mixer.empty_cache(batch_size)

    def influence(self, x: torch.Tensor) -> Influence:
        return self.block.mixer.influence(self.block.pre_norm(x))

    def units(self) -> int:
        return self.n_heads

    def ablate(self, units: list[int]) -> AbstractContextManager[None]:
        return ablating([self.block.mixer], [(0, unit) for unit in units], [self.n_heads], "head")


class HybridBackbone(Backbone):
    """S4D and sliding-window attention layers in the order ``pattern`` gives, then a final RMSNorm.

    Args:
        d_model: width D (divisible by ``n_heads``).
        pattern: the layers, first to last, each ``ssm`` or ``attention``.
        window: positions each attention query sees, itself included.
        n_heads: heads per attention layer.
        d_state: S4D state size N per channel (even).
        mlp: a GELU feed-forward layer after each attention layer.
        d_ff: its width; null: 4·d_model.
    """

    def __init__(self, d_model: int = 64, pattern: list[Layer] = ["ssm", "attention"],  # noqa: B006
                 window: int = 8, n_heads: int = 4, d_state: int = 64, mlp: bool = True,
                 d_ff: int | None = None) -> None:
        super().__init__()
        positive(d_model=d_model, window=window, n_heads=n_heads)
        if not pattern:
            raise UsageError("pattern=[] is invalid: give at least one layer, each 'ssm' or 'attention'")
        for layer in pattern:
            one_of("pattern", layer, _LAYERS)
        if "attention" in pattern and d_model % n_heads:
            raise UsageError(f"d_model={d_model} is invalid with n_heads={n_heads}: it must be divisible by n_heads")
        if d_ff is not None and not mlp:
            raise UsageError(f"d_ff={d_ff} is only used with mlp=True: leave it null for attention layers without MLP")
        self.d_model, self.pattern, self.window = d_model, list(pattern), window
        self.layers = nn.ModuleList(SSMLayer(d_model, d_state) if kind == "ssm"
                                    else WindowLayer(d_model, n_heads, window, mlp, d_ff) for kind in pattern)
        self.norm = norm_layer("rms", d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)  # B T D
        return self.norm(x)

    def dt(self) -> dict[str, torch.Tensor]:
        """The S4D layers' Δt, named by their place in ``pattern`` (``layer0``, ...)."""
        return {f"layer{i}": layer.ssm.step_size().detach() for i, layer in enumerate(self.layers)
                if isinstance(layer, SSMLayer)}

    def initial_state(self, batch_size: int) -> list:
        """Per layer: an S4D layer's complex state (B, D, N/2) or an attention layer's key-value cache."""
        return [layer.initial_state(batch_size) for layer in self.layers]

    def step(self, x_t: torch.Tensor, state: list) -> tuple[torch.Tensor, list]:
        x_t, states = step_blocks(self.layers, x_t, state)
        return self.norm(x_t), states

    def state_size(self, length: int) -> int:
        """``Backbone.state_size``, summed over layers: an S4D layer keeps its state whatever the length (D·N reals,
        N/2 complex pairs per channel), an attention layer the keys and values of the positions a query sees,
        2·D·min(length, window): the cache a sliding window needs (``step`` keeps every key, so it would count more)."""
        positive(length=length)
        return sum(count_floats(layer.initial_state(1)) if isinstance(layer, SSMLayer)
                   else 2 * self.d_model * min(length, self.window) for layer in self.layers)

    def influence(self, x: torch.Tensor) -> list[Influence]:
        """Each layer's exact form on its normalised input, in layer order: an S4D layer's channels (its kernel), an
        attention layer's heads (their windowed attention)."""
        layers = []
        with torch.no_grad():
            for layer in self.layers:
                layers.append(layer.influence(x))
                x = layer(x)
        return layers

    @contextmanager
    def ablate(self, units: Iterable[tuple[int, int]]):
        """``Backbone.ablate``: (layer, unit) is a channel of an S4D layer or a head of an attention layer."""
        sizes = [layer.units() for layer in self.layers]
        chosen = [unit_pair(item, sizes, "unit") for item in units]
        with ExitStack() as stack:
            for index, layer in enumerate(self.layers):
                stack.enter_context(layer.ablate([unit for at, unit in chosen if at == index]))
            yield
