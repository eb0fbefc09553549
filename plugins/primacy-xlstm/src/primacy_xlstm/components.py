"""xlstm's components computed faster on a CPU: subclasses with xlstm's parameters, buffers and state dict keys,
which ``XLSTMBackbone`` makes the stack's modules in place (``_with_fast_components``). Measured (one CPU thread,
B = 64, T = 256, d_model = 64, forward and backward):


- ``CausalConv1d``, a depthwise ``nn.Conv1d`` over (B, F, T) with padding on both sides, then sliced: conv1d's
  depthwise backward is slow, and the layout costs two transposes; ``primacy.backbones.conv.causal_depthwise``
  computes the same in (B, T, F) with its own backward.
- ``LinearHeadwiseExpand``, many small blocks (the mLSTM's q, k, v: 32 blocks of 4 × 4) as an einsum, which becomes
  a batched product over blocks with a transposed copy of the input and of the output, forward and backward: 26 ms
  each; one dense product with the block-diagonal matrix (zeros between blocks) takes 13 ms, though it multiplies
  zeros.
- ``MultiHeadLayerNorm``, a group norm over (B·T, NH·DH): a layer norm over each head's DH features, then the
  per-feature weight, is the same map and about 1.5 times as fast forward and backward.
- ``GatedFeedForward`` (the sLSTM block's) splits one up-projection into the gate's and the value's halves; the
  backward of a split copies both halves' gradients into one tensor, while two products on the weight's halves
  only add two (B, T, D) gradients.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from primacy.backbones.conv import causal_depthwise
from xlstm import xLSTMBlockStack
from xlstm.components.conv import CausalConv1d
from xlstm.components.feedforward import GatedFeedForward
from xlstm.components.linear_headwise import LinearHeadwiseExpand
from xlstm.components.ln import MultiHeadLayerNorm

from primacy_xlstm.block_compiled import gelu_gate_compiled
from primacy_xlstm.mlstm import block_diagonal, linear_halves


class FastCausalConv1d(CausalConv1d):
    """xlstm's ``CausalConv1d`` whose forward over a sequence from the start (no ``conv_state``, no last state asked
    for) is ``causal_depthwise`` with the same weight and bias (module docstring); anything else, and ``step``, is
    xlstm's."""

    def forward(self, x: torch.Tensor, conv_state: torch.Tensor | None = None, return_last_state: bool = False
                ) -> torch.Tensor:
        """x (B, T, F) -> (B, T, F)."""
        conv = self.conv
        plain = conv is not None and conv.groups == conv.in_channels and conv.dilation == (1,) and conv.stride == (1,)
        if conv_state is not None or return_last_state or not plain:
            return super().forward(x, conv_state, return_last_state)
        return causal_depthwise(x, conv.weight, conv.bias)[0]  # B T F


class DenseHeadwiseExpand(LinearHeadwiseExpand):
    """xlstm's ``LinearHeadwiseExpand`` (NH blocks, each mapping its own slice of the input) computed as one product
    with the block-diagonal matrix (module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., NH·D_in) -> (..., NH·D_out)."""
        return F.linear(x, block_diagonal(self.weight), self.bias)


class FastMultiHeadLayerNorm(MultiHeadLayerNorm):
    """xlstm's ``MultiHeadLayerNorm`` (a group norm with one group per head) as a layer norm over each head's
    features, then its weight and bias (module docstring). Returns, as xlstm's, a (B, NH, S, DH) view of a contiguous
    (B, S, NH, DH) tensor, so that the caller's transpose back and reshape copy nothing."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """input (B, NH, S, DH) -> (B, NH, S, DH)."""
        _, heads, _, width = input.shape
        # copied here, not inside layer_norm: its backward would copy its non-contiguous input again
        out = F.layer_norm(input.transpose(1, 2).contiguous(), (width,), eps=self.eps)  # B S NH DH
        weight = self.weight_proxy
        if weight is not None:
            out = out * weight.view(heads, width)
        if self.bias is not None:
            out = out + self.bias.view(heads, width)
        return out.transpose(1, 2)  # B NH S DH


class FastGatedFeedForward(GatedFeedForward):
    """xlstm's ``GatedFeedForward`` with its up-projection applied as two linear maps, one to the gate's
    pre-activation and one to the value, instead of one product split in two (module docstring). With
    ``gelu_compiled`` (an attribute, not in the state dict: ``XLSTMBackbone`` sets it for ``slstm_loop=
    'compiled_block'``), xlstm's GELU, no autocast: one up-projection and gelu(gate) ⊙ value compiled, forward and
    backward (``primacy_xlstm.block_compiled.gelu_gate_compiled``)."""

    gelu_compiled = False

    def forward(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """x (B, T, D) -> (B, T, D)."""
        if self.gelu_compiled and self.act_fn is F.gelu and not torch.is_autocast_enabled(x.device.type):
            hidden = gelu_gate_compiled(F.linear(x, self.proj_up.weight, self.proj_up.bias))  # B T F
            return self.dropout(self.proj_down(hidden))  # B T D
        halves = linear_halves(self.proj_up, self.config._proj_up_dim)  # the gate's rows, then the value's
        gate_preact, up_proj = (F.linear(x, weight, bias) for weight, bias in halves)  # B T F each
        return self.dropout(self.proj_down(self.act_fn(gate_preact) * up_proj))  # B T D


_FAST_COMPONENTS = {CausalConv1d: FastCausalConv1d, LinearHeadwiseExpand: DenseHeadwiseExpand,
                    MultiHeadLayerNorm: FastMultiHeadLayerNorm, GatedFeedForward: FastGatedFeedForward}


def _with_fast_components(stack: xLSTMBlockStack) -> None:
    """Makes each of xlstm's causal convolutions, headwise projections and multi-head norms in the stack the subclass
    that computes it faster (module docstring), in place: parameters, buffers and state dict stay xlstm's."""
    for module in stack.modules():
        fast = _FAST_COMPONENTS.get(type(module))
        if fast is not None:
            module.__class__ = fast
