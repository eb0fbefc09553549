"""Retention (Sun et al. 2023, "Retentive network"): linear attention with a fixed exponential decay γ per head and
rotary positions on queries and keys, read through a per-head norm and a SiLU output gate.

    S_t = γ S_{t-1} + k_t v_tᵀ,   o_t = S_tᵀ q_t,   A[t, s] = γ^(t-s) q_t · k_s   for s ≤ t

with γ_h = 1 - 2^(-e-h) for head h, e = 5 the paper's schedule (``decay_exponent``: a smaller e makes every head
forget faster), q_t and k_s rotated by their positions (so q_t · k_s depends on t - s) and k scaled by K^(-1/2).

Training computes the chunked form (``Retention._mix``, the paper's chunkwise retention): O(T·C) per head instead of
the parallel form's O(T²), which ``_weights`` builds as the exact token-to-token influence the analyses read. They
agree to rounding in float64 (tests/backbones/matrix_memory/test_matrix_memory.py).

Legend: B batch, T time, H heads, K key width (even), V value width, D model width, N chunks, C positions per
chunk.
"""

from __future__ import annotations

import torch

from primacy.backbones.matrix_memory import CHUNK, Heads, MatrixMemory, MatrixMemoryBackbone, chunked, chunked_form
from primacy.errors import UsageError


def rotate(x: torch.Tensor, start: int) -> torch.Tensor:
    """Rotary positions: x (B, H, T, K) with the pair (x[2i], x[2i+1]) at position p = start + t turned by angle
    p · 10000^(-2i/K)."""
    length, width = x.shape[-2], x.shape[-1]
    frequencies = 10000.0 ** (-torch.arange(0, width, 2, dtype=x.dtype, device=x.device) / width)  # K/2
    angles = torch.arange(start, start + length, dtype=x.dtype, device=x.device)[:, None] * frequencies  # T K/2
    cos, sin = angles.cos(), angles.sin()
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)  # B H T K


class Retention(MatrixMemory):
    """The mixer, with the per-head RMSNorm and SiLU gate of the paper's multi-scale retention; head h decays by
    γ_h = 1 - 2^(-decay_exponent-h)."""

    def __init__(self, d_model: int, n_heads: int, d_key: int, d_value: int, conv_kernel: int,
                 decay_exponent: float = 5.0) -> None:
        super().__init__(d_model, n_heads, d_key, d_value, conv_kernel, gate=True)
        self.decay_exponent = decay_exponent

    def _log_gamma(self, like: torch.Tensor) -> torch.Tensor:
        """log γ_h (H,), fixed, computed in ``like``'s precision."""
        heads = torch.arange(self.n_heads, dtype=like.dtype, device=like.device)
        return torch.log1p(-(2.0 ** (-self.decay_exponent - heads)))

    def _decays(self, length: int, like: torch.Tensor) -> torch.Tensor:
        """γ_h^(t-s) for s ≤ t and 0 above, (H, length, length), in ``like``'s precision."""
        lag = torch.arange(length, device=like.device)
        lag = (lag[:, None] - lag[None, :]).clamp(min=0).to(like.dtype)  # T T: t - s
        return torch.exp(self._log_gamma(like)[:, None, None] * lag).tril()  # H T T

    def _features(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, start: int) -> Heads:
        return Heads(rotate(q, start), rotate(k, start) * self.d_key**-0.5, v, {})

    def _weights(self, heads: Heads) -> torch.Tensor:
        length = heads.q.shape[2]
        decay = self._decays(length, heads.q)  # H T T
        return (heads.q @ heads.k.transpose(-1, -2)) * decay  # B H T T

    def _mix(self, heads: Heads) -> torch.Tensor:
        """The chunked form that training computes (``chunked_form``), equal to ``_weights(heads) @ heads.v``: within a
        chunk, (q_r · k_i) γ^(r-i); across chunks, the state S carried with its decay γ^C."""
        length = heads.q.shape[2]
        size = min(CHUNK, length)
        q, k, v = (chunked(x, size) for x in (heads.q, heads.k, heads.v))  # B H N C K|V
        within = (q @ k.transpose(-1, -2)) * self._decays(size, q)[:, None]  # B H N C C
        position = torch.arange(1, size + 1, dtype=q.dtype, device=q.device)  # C: r + 1
        log_decay = (self._log_gamma(q)[:, None] * position)[:, None, :, None]  # H 1 C 1: b_r = (r + 1) log γ
        return chunked_form(q, k, v, log_decay, within).flatten(2, 3)[:, :, :length]  # B H T V

    def _initial(self, batch_size: int, like: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"S": like.new_zeros(batch_size, self.n_heads, self.d_key, self.d_value)}

    def _recur(self, heads: Heads, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        gamma = torch.exp(self._log_gamma(heads.q))[:, None, None]  # H 1 1
        memory = gamma * state["S"] + heads.k[..., None] * heads.v[..., None, :]  # B H K V
        return torch.einsum("bhk,bhkv->bhv", heads.q, memory), {"S": memory}


class RetNetBackbone(MatrixMemoryBackbone):
    """RetNet's multi-scale retention (Sun et al. 2023) in pre-norm blocks with a GELU MLP, then a final RMSNorm.

    Args:
        d_model: width D.
        n_layers: blocks.
        n_heads: heads per block, head h decaying by γ_h = 1 - 2^(-decay_exponent-h).
        d_key, d_value: per-head widths K (even, for the rotary positions) and V; null: d_model / n_heads.
        conv_kernel: width of a causal depthwise convolution on q, k, v; 1: none (the paper).
        mlp: a feed-forward layer in each block.
        d_ff: its width; null: 4·d_model.
        decay_exponent: e > 0 in γ_h = 1 - 2^(-e-h); 5 the paper's (time constants -1 / log γ_h of about 2^(5+h)
            steps, 32 to 256 for four heads); smaller forgets faster (1: 1.4, 3.5, 7.5 and 15.5 steps).
    """

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 4, d_key: int | None = None,
                 d_value: int | None = None, conv_kernel: int = 1, mlp: bool = True, d_ff: int | None = None,
                 decay_exponent: float = 5.0) -> None:
        if not decay_exponent > 0:  # before the layers are built: the mixers read it (_mixer)
            raise UsageError(f"decay_exponent={decay_exponent} is invalid: it must be > 0 (γ_h = 1 - 2^(-e-h) in "
                             "(0, 1); 5 is the paper's)")
        self._decay_exponent = float(decay_exponent)  # a float, so nn.Module takes it before its own __init__
        super().__init__(d_model, n_layers, n_heads, d_key, d_value, conv_kernel, mlp, d_ff)
        if self.d_key % 2:
            raise UsageError(f"d_key={self.d_key} is invalid: rotary positions need an even key width per head")

    def _mixer(self, d_model: int, n_heads: int, d_key: int, d_value: int, conv_kernel: int) -> MatrixMemory:
        return Retention(d_model, n_heads, d_key, d_value, conv_kernel, self._decay_exponent)
