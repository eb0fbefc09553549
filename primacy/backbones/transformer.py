"""The paper's attention baseline: a causal pre-norm Transformer encoder, with opt-in attention capture and head
ablation."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from primacy.backbones.base import Backbone
from primacy.backbones.block import Block, Parts, norm_layer, step_blocks
from primacy.backbones.influence import Influence, ablating, unit_pair, zero_units
from primacy.checks import fits_in_memory, one_of, positive
from primacy.errors import UsageError

Positional = Literal["sinusoidal", "learned"]
KeyValues = tuple[torch.Tensor, torch.Tensor]  # a layer's cached keys (B, h, T, d_key) and values (B, h, T, D / h)
_POSITIONALS = ("sinusoidal", "learned")


@dataclass
class Attention:
    """One layer's attention from a captured forward pass.

    scores: (B, heads, T, T) pre-softmax q·k/√d_head, with -inf above the diagonal (what softmax sees).
    weights: (B, heads, T, T) post-softmax; each row sums to one over keys 0..query, zero above the diagonal.
    """

    scores: torch.Tensor
    weights: torch.Tensor


def causal_attention(q: torch.Tensor, k: torch.Tensor, window: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention of queries q on keys k (B, h, T, d_h): the scores q·k/√d_h with -inf above the diagonal (and,
    with a ``window``, on keys ``window`` or more positions back) and their softmax over keys (B, h, T, T) each, the
    weights exactly zero where the scores are -inf."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # B h T T
    scores = scores.masked_fill(~visible(q.shape[-2], window, q.device), float("-inf"))
    return scores, scores.softmax(dim=-1)  # B h T T each


def visible(length: int, window: int | None, device: torch.device | None = None) -> torch.Tensor:
    """(T, T) bool: query t sees key s when s ≤ t and, with a ``window``, t - s < window."""
    lag = torch.arange(length, device=device)
    lag = lag[:, None] - lag[None, :]  # T T: t - s
    return (lag >= 0) if window is None else (lag >= 0) & (lag < window)


def sinusoidal_positions(length: int, d_model: int, device: torch.device | None = None, start: int = 0
                         ) -> torch.Tensor:
    """Vaswani et al.'s encoding of positions start..length-1 (T, D): sin on even channels, cos on odd ones,
    wavelengths 2π .. 2π·10⁴."""
    position = torch.arange(start, length, dtype=torch.float32, device=device)[:, None]  # T 1
    rate = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32, device=device) * (-math.log(1e4) / d_model))
    angle = position * rate  # T ceil(D/2)
    pe = torch.zeros(len(position), d_model, device=device)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention through the fused kernel; the explicit path only while capturing.

    Heads in ``ablated`` (set by TransformerBackbone.ablate_heads) have their value vectors zeroed on both paths,
    so they add nothing to the output projection; their attention is still computed (and captured). With a
    ``window``, each query sees only its ``window`` most recent keys, itself included (sliding-window attention).
    Queries and keys are ``d_key`` wide per head (D / heads unless given), values always D / heads; the fused
    projection's rows are laid out [q | k | v].
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float, window: int | None = None,
                 d_key: int | None = None) -> None:
        super().__init__()
        self.n_heads, self.dropout, self.window = n_heads, dropout, window
        self.d_key, self.d_value = d_key or d_model // n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 2 * n_heads * self.d_key + d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.captured: list[Attention] | None = None  # set by TransformerBackbone.capture_attention
        self.ablated: frozenset[int] = frozenset()  # set by TransformerBackbone.ablate_heads

    def _split(self, projected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The fused projection (B, T, 2·h·d_key + D) as queries, keys (B, h, T, d_key) and values (B, h, T, D / h),
        the ablated heads' values zero."""
        b, t, _ = projected.shape
        widths = [self.n_heads * self.d_key] * 2 + [self.n_heads * self.d_value]
        q, k, v = (part.view(b, t, self.n_heads, -1).transpose(1, 2) for part in projected.split(widths, dim=-1))
        return q, k, self._ablate(v)

    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys (B, h, T, d_key) and values (B, h, T, d_h) of x (B, T, D), the ablated heads' values zero."""
        return self._split(self.qkv(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self._heads(x)  # B h T d_key (q, k), B h T d_h (v)
        dropout = self.dropout if self.training else 0.0
        if self.captured is None:
            out = self._fused(q, k, v, dropout)  # B h T d_h
        else:
            out = self._explicit(q, k, v, dropout)
        return self.proj(out.transpose(1, 2).reshape(b, t, d))  # B T D

    def empty_cache(self, batch_size: int) -> KeyValues:
        """The (keys, values) cache before the first position: (B, heads, 0, d_key) and (B, heads, 0, D / heads)."""
        weight = self.qkv.weight
        return (weight.new_zeros(batch_size, self.n_heads, 0, self.d_key),
                weight.new_zeros(batch_size, self.n_heads, 0, self.d_value))

    def step(self, x: torch.Tensor, cache: KeyValues) -> tuple[torch.Tensor, KeyValues]:
        """The next position's attention: x (B, D) -> (B, D), attending to the cached keys and values and its own
        (appended to the cache). Ablated heads are zeroed as in forward."""
        b, d = x.shape
        if self.captured is not None:
            raise UsageError("capture_attention records whole forward passes: step() cannot be captured")
        q, k, v = self._split(self.qkv(x)[:, None])  # B h 1 d_key (q, k), B h 1 d_h (v)
        keys, values = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)  # B h t+1 d_h
        dropout = self.dropout if self.training else 0.0
        seen = slice(-self.window, None) if self.window is not None else slice(None)  # the cache keeps every key
        out = F.scaled_dot_product_attention(q, keys[:, :, seen], values[:, :, seen], dropout_p=dropout)  # B h 1 d_h
        return self.proj(out.transpose(1, 2).reshape(b, d)), (keys, values)

    def _fused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout: float) -> torch.Tensor:
        """The fused kernel's attention (B, h, T, d_h), causal, within the window if there is one."""
        if self.window is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        mask = visible(q.shape[-2], self.window, q.device)  # T T
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)

    def _ablate(self, v: torch.Tensor) -> torch.Tensor:
        """v (B, h, T, d_h) with the ablated heads' values exact zeros, as if their W_V and b_V were zero."""
        return zero_units(v, self.ablated, dim=1)

    def influence(self, x: torch.Tensor) -> Influence:
        """This layer's attention on its input x (B, T, D) as an exact mixing form, no dropout: weights are the
        attention probabilities (B, h, T, T), values the heads' value vectors (B, h, T, d_h), output the heads'
        outputs before the output projection from the fused kernel forward uses."""
        q, k, v = self._heads(x)  # B h T d_key (q, k), B h T d_h (v)
        output = self._fused(q, k, v, 0.0)  # B h T d_h
        return Influence(causal_attention(q, k, self.window)[1], v, output, "head")

    def _explicit(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout: float) -> torch.Tensor:
        scores, weights = causal_attention(q, k, self.window)  # B h T T each
        self.captured.append(Attention(scores.detach(), weights.detach()))
        return F.dropout(weights, dropout, self.training) @ v  # B h T d_h


# The Transformer's blocks as its checkpoints hold them: the attention is ``attn``, both norms come before it, and the
# second is built (and saved) even without an MLP.
PARTS = Parts(mixer="attn", norms_first=True, spare_norm=True)


class TransformerBackbone(Backbone):
    """Causal Transformer encoder: positional encoding, pre-norm blocks, final LayerNorm.

    Attention runs through ``F.scaled_dot_product_attention(is_causal=True)`` (no materialised mask). Inside
    ``with backbone.capture_attention() as layers:`` it runs explicitly instead and appends every layer's
    pre- and post-softmax attention to ``layers`` (an ``Attention`` per layer and forward pass); outside, no
    attention matrix is kept. Inside ``with backbone.ablate_heads([(layer, head), ...]):`` those heads' value
    vectors are zero, so they contribute nothing but the (shared) output-projection bias.

    Args:
        d_model: width D; must be divisible by ``n_heads``.
        n_layers: Transformer blocks.
        n_heads: attention heads per block.
        d_ff: feed-forward width; None means 4·D.
        dropout: dropout on attention weights, residual branches and the feed-forward output.
        positional: ``sinusoidal`` (fixed, any length) or ``learned`` (one vector per position up to
            ``max_length``).
        max_length: longest input for ``learned`` positions; only allowed with them.
        mlp: feed-forward layers in each block; False gives the attention-only Transformer of the induction-head
            literature (Elhage et al. 2021), together with ``layer_norm=False``.
        layer_norm: the pre-norm and final LayerNorms; False makes them identities.
        window: sliding-window attention: each query sees its ``window`` most recent positions (itself included);
            null: every earlier position. ``step`` keeps every key in its cache and attends to the last ``window``.
        d_key: the width of each head's queries and keys; null: D / heads. Values stay D / heads wide, so a
            narrower key narrows only what attention can tell apart (the atlas's knob for attention).
    """

    def __init__(
        self,
        d_model: int = 64,
        n_layers: int = 2,
        n_heads: int = 4,
        d_ff: int | None = None,
        dropout: float = 0.0,
        positional: Positional = "sinusoidal",
        max_length: int | None = None,
        mlp: bool = True,
        layer_norm: bool = True,
        window: int | None = None,
        d_key: int | None = None,
    ) -> None:
        super().__init__()
        positive(d_model=d_model, n_layers=n_layers, n_heads=n_heads)
        if d_key is not None:
            positive(d_key=d_key)
        if window is not None and window < 1:
            raise UsageError(f"window={window} is invalid: it must be at least 1 (or null for full causal attention)")
        if d_model % n_heads:
            raise UsageError(f"d_model={d_model} is invalid with n_heads={n_heads}: it must be divisible by n_heads")
        if d_ff is not None and not mlp:
            raise UsageError(f"d_ff={d_ff} is only used with mlp=True: leave it null for an attention-only model")
        if d_ff is not None and d_ff < 1:
            raise UsageError(f"d_ff={d_ff} is invalid: it must be at least 1 (or null for 4·d_model)")
        if not 0 <= dropout < 1:
            raise UsageError(f"dropout={dropout} is invalid: it must lie in [0, 1)")
        one_of("positional", positional, _POSITIONALS)
        if positional == "learned" and (max_length is None or max_length < 1):
            raise UsageError(f"max_length={max_length} is invalid for learned positions: give the longest input length")
        if positional == "sinusoidal" and max_length is not None:
            raise UsageError(f"max_length={max_length} is only used by positional='learned': leave it null")
        d_key = d_key or d_model // n_heads
        width = 2 * n_heads * d_key + 2 * d_model + 2 * (d_ff or 4 * d_model) * mlp  # Q, K, V, O and MLP per row
        fits_in_memory("the layers' weights", 4 * n_layers * d_model * width, d_model=d_model, n_layers=n_layers)
        self.d_model, self.n_heads, self.positional, self.max_length = d_model, n_heads, positional, max_length
        self.window, self.d_key = window, d_key
        self.position = nn.Embedding(max_length, d_model) if positional == "learned" else None
        if self.position is not None:
            nn.init.normal_(self.position.weight, std=0.02)
        self.drop = nn.Dropout(dropout)
        norm = "layer" if layer_norm else "none"
        width = (d_ff or 4 * d_model) if mlp else None
        self.blocks = nn.ModuleList(Block(d_model, CausalSelfAttention(d_model, n_heads, dropout, window, d_key), norm,
                                          width, dropout, PARTS) for _ in range(n_layers))
        self.norm = norm_layer(norm, d_model)

    def _positions(self, length: int, device: torch.device, start: int = 0) -> torch.Tensor:
        """The encodings of positions start..length-1, (T, D)."""
        if self.position is None:
            return sinusoidal_positions(length, self.d_model, device, start)  # T D
        if length > self.max_length:
            raise UsageError(f"input length {length} exceeds max_length={self.max_length} of the learned positions")
        return self.position.weight[start:length]  # T D

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(x + self._positions(x.shape[1], x.device).to(x.dtype))  # B T D
        for block in self.blocks:
            h = block(h)
        return self.norm(h)

    def initial_state(self, batch_size: int) -> list[KeyValues]:
        """Empty key-value caches, a (keys, values) pair per block: (B, heads, 0, d_key), (B, heads, 0, D / heads)."""
        return [block.attn.empty_cache(batch_size) for block in self.blocks]

    def step(self, x_t: torch.Tensor, state: list[KeyValues]) -> tuple[torch.Tensor, list[KeyValues]]:
        """The next position t (the caches' length): x_t (B, D) -> y_t (B, D) and the caches with t appended. Each
        step attends to the cache instead of recomputing the prefix (a key-value cache); not inside
        capture_attention."""
        t = state[0][0].shape[2]
        h = self.drop(x_t + self._positions(t + 1, x_t.device, start=t)[0].to(x_t.dtype))  # B D: position t alone
        h, caches = step_blocks(self.blocks, h, state)
        return self.norm(h), caches

    def state_size(self, length: int) -> int:
        """``Backbone.state_size``: per block, the keys and values of the positions a query can see, (heads·d_key +
        D)·min(length, window) (every position without a window; 2·D·length at the default d_key): the cache a
        sliding window needs. ``step`` keeps every key even with a window (its cache's length is the next position),
        so measuring it would count more."""
        positive(length=length)
        seen = length if self.window is None else min(length, self.window)
        return len(self.blocks) * (self.n_heads * self.d_key + self.d_model) * seen

    def influence(self, x: torch.Tensor) -> list[Influence]:
        """Each block's attention on x (B, T, D), in layer order, as in evaluation mode (no dropout); a unit is a
        head. The layer's input is the block's normalised residual stream, LN(h), as forward computes it; weights
        (B, heads, T, T) are the attention probabilities, values the value vectors (B, heads, T, d_head), and
        Σ_s weights · values the heads' outputs before the output projection. Ablated heads have zero values."""
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                h = x + self._positions(x.shape[1], x.device).to(x.dtype)  # B T D
                layers = []
                for block in self.blocks:
                    layers.append(block.attn.influence(block.norm1(h)))
                    h = block(h)
        finally:
            self.train(was_training)
        return layers

    @contextmanager
    def capture_attention(self) -> Iterator[list[Attention]]:
        """Record each layer's attention (in layer order, per forward pass) while the block is open."""
        layers: list[Attention] = []
        for block in self.blocks:
            block.attn.captured = layers
        try:
            yield layers
        finally:
            for block in self.blocks:
                block.attn.captured = None

    def heads(self) -> list[tuple[int, int]]:
        """Every attention head as a (layer, head) pair, 0-based, layer by layer."""
        return [(layer, head) for layer in range(len(self.blocks)) for head in range(self.n_heads)]

    def ov_weights(self, layer: int, head: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A head's value and output maps in the row-vector convention: W_V (D, d_head), W_O (d_head, D), so that
        the head writes softmax(scores) · (x W_V + b_V) W_O to the residual stream (the projection bias aside)."""
        layer, head = unit_pair((layer, head), [self.n_heads] * len(self.blocks), "head")
        attn = self.blocks[layer].attn
        d_head = self.d_model // self.n_heads
        columns = slice(head * d_head, (head + 1) * d_head)
        w_v = attn.qkv.weight[2 * self.n_heads * self.d_key :][columns].T  # D d_head
        w_o = attn.proj.weight[:, columns].T  # d_head D
        return w_v, w_o

    def ablate_heads(self, heads: Iterable[tuple[int, int]]) -> AbstractContextManager[None]:
        """Zero the value vectors of the given (layer, head) pairs (0-based) while the block is open.

        Blocks nest: an inner block adds its heads to those already ablated, and each block restores what was
        ablated before it on exit, exceptions included. Raises UsageError, ablating nothing, on a pair out of range.
        """
        return ablating([block.attn for block in self.blocks], heads, [self.n_heads] * len(self.blocks), "head")

    def ablate(self, units: Iterable[tuple[int, int]]) -> AbstractContextManager[None]:
        """``Backbone.ablate``: a unit is a head, ``ablate_heads``."""
        return self.ablate_heads(units)
