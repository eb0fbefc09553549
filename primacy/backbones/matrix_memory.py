"""The modern recurrent family's shared frame: token mixers whose state per head is a matrix S (d_k × d_v) that keys
and values write and queries read, in a stack of pre-norm residual blocks (``primacy.backbones.block``).

Every such mixer has two exact forms of the same map, and each family module (linear_attention, retnet, gla,
deltanet) writes both from its paper's recurrence:

- parallel: outputs O = A V per head, with A (T, T) lower triangular built from queries, keys and gates
  (``_weights``); the one training runs, O(T²) per head. A is the layer's exact token-to-token influence.
- recurrent: S_t from S_{t-1} and position t's key, value and gates, o_t read from S_t (``_recur``); what ``step``
  runs, O(1) per position. ``influence`` computes its output with it, so the reconstruction test compares the two.

Legend: B batch, T time, H heads, K key width d_k, V value width d_v, D model width.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from primacy.backbones.base import Backbone
from primacy.backbones.block import Block, norm_layer, step_blocks
from primacy.backbones.conv import causal_depthwise
from primacy.backbones.influence import Influence, ablating, zero_units
from primacy.checks import fits_in_memory, positive
from primacy.errors import UsageError


@dataclass
class Heads:
    """What a mixer reads from its input, per head: q, k (B, H, T, K), v (B, H, T, V) and the family's gates
    (``gates``: name -> (B, H, T) or (B, H, T, K))."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    gates: dict[str, torch.Tensor]

    def at(self, t: int) -> Heads:
        """Position t alone: q, k (B, H, K), v (B, H, V), gates without their time axis."""
        return Heads(self.q[:, :, t], self.k[:, :, t], self.v[:, :, t], {n: g[:, :, t] for n, g in self.gates.items()})


CHUNK = 16  # positions per chunk of the chunked forms that training runs (a family may measure and set its own)


def chunked(x: torch.Tensor, size: int) -> torch.Tensor:
    """x (B, H, T, ...) -> (B, H, N, C, ...) in chunks of ``size`` positions for a family's chunked form, the last
    padded with zeros: padding comes after every real position, so it changes no real output (a zero key, value, β
    and log gate write nothing and keep the state), and zeros keep it finite."""
    pad = -x.shape[2] % size
    if pad:
        x = torch.cat([x, x.new_zeros(*x.shape[:2], pad, *x.shape[3:])], dim=2)
    return x.reshape(*x.shape[:2], -1, size, *x.shape[3:])


def chunked_form(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_decay: torch.Tensor | None,
                 within: torch.Tensor) -> torch.Tensor:
    """The chunked form of a decaying linear-attention memory, S_t = diag(α_t) S_{t-1} + k_t v_tᵀ and o_t = S_tᵀ q_t,
    from chunks of C positions (``chunked``): q, k (B, H, N, C, K), v (B, H, N, C, V); ``log_decay`` b, broadcastable
    to q, the cumulative log gate from each chunk's start, b_r = Σ_{j≤r} log α_j (None: no decay, α = 1); ``within``
    (B, H, N, C, C), Σ_d q_r[d] k_i[d] e^{b_r[d] - b_i[d]} for i ≤ r and 0 above, which each family computes as its
    gates allow. In a chunk whose state before it is S_0,

        o_r = (q_r ⊙ e^{b_r})ᵀ S_0 + Σ_{i≤r} within[r, i] v_i
        S_C = diag(e^{b_C}) S_0 + Σ_i (k_i ⊙ e^{b_C - b_i}) v_iᵀ

    with every exponent ≤ 0; only the carry of S_0 from chunk to chunk is sequential. Returns O (B, H, N, C, V)."""
    if log_decay is None:
        q_start, k_end, kept = q, k, None
    else:
        last = log_decay[..., -1:, :]  # (B) H (N) 1 K: b_C
        q_start, k_end = q * torch.exp(log_decay), k * torch.exp(last - log_decay)  # B H N C K
        kept = torch.exp(last).transpose(-1, -2)  # (B) H (N) K|1 1: what of S_0 each key row keeps
        kept = kept.expand(*q.shape[:3], q.shape[-1], 1).unbind(2)  # N × (B H K 1)
    writes = k_end.transpose(-1, -2) @ v  # B H N K V: Σ_i (k_i ⊙ e^{b_C - b_i}) v_iᵀ
    memory, starts = writes.new_zeros(*writes.shape[:2], *writes.shape[3:]), []  # B H K V: S_0 of the first chunk
    for n, write in enumerate(writes.unbind(2)):  # unbind: one backward for all chunks
        starts.append(memory)
        memory = (memory if kept is None else kept[n] * memory) + write  # B H K V
    return q_start @ torch.stack(starts, dim=2) + within @ v  # B H N C V


class MatrixMemory(nn.Module):
    """One token mixer: q, k, v projections (through a short causal depthwise convolution when ``conv_kernel`` > 1,
    as GLA and DeltaNet use it), the family's mixing (``_weights`` and ``_recur``), then per head an RMSNorm, a
    SiLU output gate and the output projection (with ``gate``), or the output projection alone.

    Subclasses implement ``_features`` (q, k, v and gates from the convolved projections), ``_weights``,
    ``_initial`` and ``_recur``; each must also accept a one-position input in ``_features`` (for ``step``).
    """

    def __init__(self, d_model: int, n_heads: int, d_key: int, d_value: int, conv_kernel: int, gate: bool) -> None:
        super().__init__()
        self.n_heads, self.d_key, self.d_value, self.conv_kernel = n_heads, d_key, d_value, conv_kernel
        width = n_heads * (2 * d_key + d_value)
        self.qkv = nn.Linear(d_model, width, bias=False)
        # its weights only: _heads pads it causally with the positions before (the step's window, or zeros)
        self.conv = nn.Conv1d(width, width, conv_kernel, groups=width) if conv_kernel > 1 else None
        self.norm = nn.RMSNorm(d_value, eps=1e-6) if gate else None
        self.gate = nn.Linear(d_model, n_heads * d_value, bias=False) if gate else None
        self.out = nn.Linear(n_heads * d_value, d_model, bias=False)
        self.ablated: frozenset[int] = frozenset()  # heads whose mixing output is zero (MatrixMemoryBackbone.ablate)

    # --- the family's own parts -------------------------------------------------------------------------------------
    @abstractmethod
    def _features(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, start: int) -> Heads:
        """From the (convolved) projections q, k (B, H, T, K), v (B, H, T, V) of input x (B, T, D), whose first
        position is ``start`` of the sequence: the heads' queries, keys, values and gates."""

    @abstractmethod
    def _weights(self, heads: Heads) -> torch.Tensor:
        """The parallel form: A (B, H, T, T), lower triangular, with O = A V."""

    @abstractmethod
    def _initial(self, batch_size: int, like: torch.Tensor) -> dict[str, torch.Tensor]:
        """The recurrent state before position 0: at least ``S`` (B, H, K, V)."""

    @abstractmethod
    def _recur(self, heads: Heads, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The recurrent form at one position (``heads`` from ``Heads.at``): o_t (B, H, V) and the next state."""

    # --- shared -----------------------------------------------------------------------------------------------------
    def _heads(self, x: torch.Tensor, window: torch.Tensor | None = None, start: int = 0) -> tuple[Heads, torch.Tensor]:
        """Heads of x (B, T, D), and the last conv_kernel - 1 projections (B, conv_kernel - 1, width) for the next
        step; ``window`` holds those of the positions before x (zeros before the first)."""
        p = self.qkv(x)  # B T width
        if self.conv is not None:
            p, window = causal_depthwise(p, self.conv.weight, self.conv.bias, window)  # B T width, B kernel-1 width
        split = [self.n_heads * self.d_key] * 2 + [self.n_heads * self.d_value]
        q, k, v = (part.unflatten(-1, (self.n_heads, -1)).transpose(1, 2)  # B H T K|V, each head's features contiguous
                   for part in torch.split(p, split, dim=-1))
        return self._features(q, k, v, x, start), window

    def _output(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Mixing output o (B, H, T, V) of input x (B, T, D) -> (B, T, D): ablation, per-head norm and gate, out."""
        o = zero_units(o, self.ablated, dim=1)
        if self.norm is not None:
            o = self.norm(o)
        o = o.transpose(1, 2).reshape(*x.shape[:2], -1)  # B T H·V
        if self.gate is not None:
            o = o * F.silu(self.gate(x))
        return self.out(o)

    def _mix(self, heads: Heads) -> torch.Tensor:
        """The mixing output O (B, H, T, V) that training computes: the parallel form A V here; a family may override
        it with a faster form of the same map (a chunked one), equal to A V in float64."""
        return self._weights(heads) @ heads.v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, T, D), by ``_mix``."""
        heads, _ = self._heads(x)
        return self._output(self._mix(heads), x)  # B H T V -> B T D

    def initial_state(self, batch_size: int) -> dict[str, torch.Tensor]:
        weight = self.qkv.weight
        state = self._initial(batch_size, weight)
        state["t"] = torch.zeros((), dtype=torch.long, device=weight.device)
        if self.conv is not None:
            state["window"] = weight.new_zeros(batch_size, self.conv_kernel - 1, weight.shape[0])
        return state

    def step(self, x_t: torch.Tensor, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One position by the recurrent form: x_t (B, D) -> (B, D)."""
        heads, window = self._heads(x_t[:, None], state.get("window"), int(state["t"]))
        o, new = self._recur(heads.at(0), state)  # B H V
        new["t"] = state["t"] + 1
        if window is not None:
            new["window"] = window
        return self._output(o[:, :, None], x_t[:, None])[:, 0], new

    def influence(self, x: torch.Tensor) -> Influence:
        """A (B, H, T, T) on x (B, T, D), the values V (B, H, T, V) it mixes, and as output the recurrent form's
        o_t over the whole sequence (an independent path: Σ_s A[t, s] v_s must equal it)."""
        with torch.no_grad():
            heads, _ = self._heads(x)
            state, outputs = self._initial(x.shape[0], x), []
            for t in range(x.shape[1]):
                o, state = self._recur(heads.at(t), state)
                outputs.append(o)
            return Influence(self._weights(heads), heads.v, torch.stack(outputs, dim=2), "head")


class MatrixMemoryBackbone(Backbone):
    """A stack of ``Block``s (RMSNorm, no dropout) around one family's mixer, then a final RMSNorm. Subclasses build
    the mixers (``_mixer``); one whose arguments are these, with these defaults, inherits this constructor.

    Args:
        d_model: width D.
        n_layers: blocks.
        n_heads: heads per block.
        d_key, d_value: per-head widths K and V; null: d_model / n_heads.
        conv_kernel: width of a causal depthwise convolution on q, k, v; 1: none.
        mlp: a feed-forward layer in each block.
        d_ff: its width; null: 4·d_model.
    """

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 4, d_key: int | None = None,
                 d_value: int | None = None, conv_kernel: int = 1, mlp: bool = True, d_ff: int | None = None) -> None:
        super().__init__()
        positive(d_model=d_model, n_layers=n_layers, n_heads=n_heads, conv_kernel=conv_kernel)
        if (d_key is None or d_value is None) and d_model % n_heads:
            raise UsageError(f"d_model={d_model} is invalid with n_heads={n_heads}: it must be divisible by n_heads "
                             "(or give d_key and d_value)")
        d_key, d_value = d_key or d_model // n_heads, d_value or d_model // n_heads
        positive(d_key=d_key, d_value=d_value)
        if d_ff is not None and not mlp:
            raise UsageError(f"d_ff={d_ff} is only used with mlp=True: leave it null for a mixer-only model")
        if d_ff is not None and d_ff < 1:
            raise UsageError(f"d_ff={d_ff} is invalid: it must be at least 1 (or null for 4·d_model)")
        width = n_heads * (3 * d_key + 3 * d_value) + 8 * d_model * mlp  # per row of d_model: qkv, gate, out, MLP
        fits_in_memory("the layers' weights", 4 * n_layers * d_model * width, d_model=d_model, n_layers=n_layers)
        self.d_model, self.n_heads, self.d_key, self.d_value = d_model, n_heads, d_key, d_value
        hidden = (d_ff or 4 * d_model) if mlp else None
        self.blocks = nn.ModuleList(Block(d_model, self._mixer(d_model, n_heads, d_key, d_value, conv_kernel), "rms",
                                          hidden) for _ in range(n_layers))
        self.norm = norm_layer("rms", d_model)

    @abstractmethod
    def _mixer(self, d_model: int, n_heads: int, d_key: int, d_value: int, conv_kernel: int) -> MatrixMemory:
        """One layer's mixer."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)  # B T D
        return self.norm(x)

    def initial_state(self, batch_size: int) -> list[dict[str, torch.Tensor]]:
        """Per layer: the matrix memory S (B, H, K, V) and what else the family keeps, the position t and the
        convolution's last inputs."""
        return [block.mixer.initial_state(batch_size) for block in self.blocks]

    def step(self, x_t: torch.Tensor, state: list[dict]) -> tuple[torch.Tensor, list[dict]]:
        """One position, x_t (B, D) -> y_t (B, D), by each layer's recurrent form."""
        x_t, states = step_blocks(self.blocks, x_t, state)
        return self.norm(x_t), states

    def influence(self, x: torch.Tensor) -> list[Influence]:
        """Each layer's A (B, H, T, T) on x (B, T, D), in layer order, a unit being a head; the layer's input is the
        normalised residual stream, as forward computes it; values are the heads' value vectors (B, H, T, V)."""
        layers = []
        with torch.no_grad():
            for block in self.blocks:
                layers.append(block.mixer.influence(block.norm1(x)))
                x = block(x)
        return layers

    def ablate(self, units: Iterable[tuple[int, int]]) -> AbstractContextManager[None]:
        """``Backbone.ablate``: a unit (layer, h) is head h of a layer; its mixing output is zero before the per-head
        norm, gate and output projection, in forward and step."""
        mixers = [block.mixer for block in self.blocks]
        return ablating(mixers, units, [self.n_heads] * len(mixers), "head")

