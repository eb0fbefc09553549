"""A sequence-to-sequence model with attention (Salvatore & Zhang 2025, after Luong et al. 2015): an RNN encoder, an
RNN decoder, and at each step the decoder's attention over the encoder's states, written causally.

In machine translation the encoder reads the whole source, then the decoder starts from the encoder's last state and
attends over all its states. A backbone reads one causal stream (the study list, the cue, the fed outputs) and is not
told where the list ends, so here both RNNs read every position, and the decoder at position t attends over the
encoder's states at positions s <= t only: at the cue and after it, that is the list, the distractors and the cue (the
fed items too, which a model may learn to pass over). The decoder's own reading of the list stands in for starting
from the encoder's last state; the output is Luong's attentional state tanh(W_c [context; decoder state]).

Legend: B batch, T time (t the query, s the source), D model width, h heads, d a head's width (D / h).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from primacy.backbones.base import Backbone
from primacy.backbones.influence import Influence, ablating, zero_units
from primacy.backbones.transformer import causal_attention
from primacy.checks import fits_in_memory, one_of, positive
from primacy.errors import UsageError

Cell = Literal["gru", "lstm"]
_CELLS = ("gru", "lstm")
RNNState = torch.Tensor | tuple[torch.Tensor, torch.Tensor]  # a GRU's hidden state or an LSTM's (hidden, cell)


class Seq2SeqBackbone(Backbone):
    """Encoder RNN, decoder RNN, causal multiplicative attention of the decoder's states on the encoder's, then
    tanh(W_c [context; decoder state]).

    Args:
        d_model: width D of the inputs, both RNNs' states and the output (divisible by ``n_heads``).
        n_heads: attention heads; Luong's attention (and Salvatore & Zhang's) has 1. Each head scores (W_q d_t) ·
            (W_k e_s) / sqrt(d) and mixes its own values W_v e_s.
        cell: the RNNs' cell, ``gru`` or ``lstm`` (PyTorch's initialisation).
    """

    def __init__(self, d_model: int = 64, n_heads: int = 1, cell: Cell = "gru") -> None:
        super().__init__()
        positive(d_model=d_model, n_heads=n_heads)
        one_of("cell", cell, _CELLS)
        if d_model % n_heads:
            raise UsageError(f"d_model={d_model} is invalid with n_heads={n_heads}: it must be divisible by n_heads")
        fits_in_memory("the RNNs' and attention's weights", 4 * 16 * d_model**2, d_model=d_model)
        self.d_model, self.n_heads, self.cell = d_model, n_heads, cell
        rnn = nn.GRU if cell == "gru" else nn.LSTM
        self.encoder, self.decoder = rnn(d_model, d_model, batch_first=True), rnn(d_model, d_model, batch_first=True)
        self.query, self.key, self.value = (nn.Linear(d_model, d_model) for _ in range(3))
        self.combine = nn.Linear(2 * d_model, d_model)
        self.ablated: frozenset[int] = frozenset()  # heads whose values are zero (``ablate``)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        encoded, decoded = self._recur(self.encoder, x)[0], self._recur(self.decoder, x)[0]  # B T D each
        q, k, v = self._heads(decoded, encoded)  # B h T d each
        context = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # B h T d
        return self._output(context, decoded)

    def initial_state(self, batch_size: int) -> tuple[RNNState, RNNState, torch.Tensor, torch.Tensor]:
        """The encoder's and decoder's zero states ((1, B, D), an LSTM's as (hidden, cell)) and the attention's empty
        key and value caches (B, h, 0, d)."""
        zeros = self.combine.weight.new_zeros(1, batch_size, self.d_model)

        def rnn_state() -> RNNState:
            return zeros.clone() if self.cell == "gru" else (zeros.clone(), zeros.clone())

        empty = self.combine.weight.new_zeros(batch_size, self.n_heads, 0, self.d_model // self.n_heads)
        return rnn_state(), rnn_state(), empty, empty.clone()

    def step(self, x_t: torch.Tensor, state: tuple[RNNState, RNNState, torch.Tensor, torch.Tensor]
             ) -> tuple[torch.Tensor, tuple[RNNState, RNNState, torch.Tensor, torch.Tensor]]:
        """One position: x_t (B, D) -> y_t (B, D); the RNNs take one step, the encoder's new state joins the cache
        and the decoder's attends over every cached one."""
        encoder_state, decoder_state, keys, values = state
        encoded, encoder_state = self._recur(self.encoder, x_t[:, None], encoder_state)  # B 1 D
        decoded, decoder_state = self._recur(self.decoder, x_t[:, None], decoder_state)  # B 1 D
        q, k, v = self._heads(decoded, encoded)  # B h 1 d each
        keys, values = torch.cat([keys, k], dim=2), torch.cat([values, v], dim=2)  # B h t+1 d
        context = F.scaled_dot_product_attention(q, keys, values)  # B h 1 d: every cached position is in the past
        return self._output(context, decoded)[:, 0], (encoder_state, decoder_state, keys, values)

    def influence(self, x: torch.Tensor) -> list[Influence]:
        """The attention as an exact mixing form, without gradients: weights (B, h, T, T) the decoder's attention on
        the encoder's states, values the heads' value vectors (B, h, T, d), output the context forward mixes (the
        fused kernel's), before it is combined with the decoder's state."""
        with torch.no_grad():
            encoded, decoded = self._recur(self.encoder, x)[0], self._recur(self.decoder, x)[0]  # B T D each
            q, k, v = self._heads(decoded, encoded)  # B h T d each
            output = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # B h T d
            return [Influence(causal_attention(q, k)[1], v, output, "head")]

    def ablate(self, units: Iterable[tuple[int, int]]):
        """``Backbone.ablate``: (0, head) zeroes a head's values, so its context is zero, in forward and step."""
        return ablating([self], units, [self.n_heads], "head")

    def _heads(self, decoded: torch.Tensor, encoded: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries from the decoder's states, keys and values from the encoder's, (B, T, D) -> (B, h, T, d) each; the
        ablated heads' values zero."""
        b, t, _ = decoded.shape

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, self.n_heads, -1).transpose(1, 2)  # B h T d

        q, k, v = split(self.query(decoded)), split(self.key(encoded)), split(self.value(encoded))
        return q, k, zero_units(v, self.ablated, dim=1)

    def _output(self, context: torch.Tensor, decoded: torch.Tensor) -> torch.Tensor:
        """tanh(W_c [context; decoder state]): context (B, h, T, d), decoded (B, T, D) -> (B, T, D)."""
        b, _, t, _ = context.shape
        context = context.transpose(1, 2).reshape(b, t, self.d_model)  # B T D
        return torch.tanh(self.combine(torch.cat([context, decoded.to(context.dtype)], dim=-1)))

    def _recur(self, rnn: nn.RNNBase, x: torch.Tensor, state: RNNState | None = None
               ) -> tuple[torch.Tensor, RNNState]:
        """``rnn`` on x (B, T, D). Under CPU autocast it runs in float32, as the LSTM backbone's does: torch's CPU
        RNNs have no bfloat16 kernel on many CPUs (pytorch/pytorch#88136)."""
        if x.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
            with torch.autocast(device_type="cpu", enabled=False):
                return rnn(x.float(), state)
        return rnn(x, state)
