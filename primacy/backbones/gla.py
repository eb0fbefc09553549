"""Gated linear attention (Yang, Wang, Shen, Panda & Kim 2024, "Gated linear attention transformers with
hardware-efficient training"): linear attention whose memory decays by a data-dependent gate per key dimension.

    S_t = diag(α_t) S_{t-1} + k_t v_tᵀ,   o_t = S_tᵀ q_t
    A[t, s] = Σ_d q_t[d] k_s[d] Π_{s<j≤t} α_j[d]   for s ≤ t

with α_t = σ(W₂ W₁ x_t + b)^(1/τ), τ = 16, W₁ of rank 16 (the paper's parametrisation), k scaled by K^(-1/2), and a
per-head norm and SiLU output gate.

Training computes the chunked form (``GatedLinearAttention._mix``, the paper's chunkwise parallel form, section 4):
the sequence is cut into chunks of ``CHUNK`` positions, the state S (K × V per head) is carried from chunk to chunk,
and inside a chunk one matrix product of q ⊙ e^{b} and k ⊙ e^{-b} (b the cumulative log gate from the chunk's start)
gives the decayed products between positions: per head, time O(T·K·(C + V)) and memory O(T·(C + K) + T/C·K·V).
Where a chunk's gates close so far that e^{-b} could overflow, the decays between positions are formed directly
instead, (C, C, K) per head and chunk, every exponent ≤ 0. The parallel form (``_weights``) builds every A[t, s]
through its (T, T, K) decays, O(T²·K) memory: it is the exact token-to-token influence that the analyses read. The two
agree to rounding in float64 (tests/backbones/matrix_memory/test_gla_chunked.py).

Legend: B batch, T time, H heads, K key width, V value width, D model width, R the gate's rank, N chunks, C positions
per chunk.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from primacy.backbones.matrix_memory import Heads, MatrixMemory, MatrixMemoryBackbone, chunked, chunked_form
from primacy.checks import fits_in_memory

GATE_RANK, GATE_TEMPERATURE = 16, 16.0
# positions per chunk of the chunked form: C × C products per chunk, T / C sequential steps of the state. A one-block
# GLA's training step at T 256 took 404, 342, 374, 491 ms at C = 8, 16, 32, 64 (T 64: 8 and 16 equal; one thread)
CHUNK = 16
# The largest log decay a chunk may span (-b_C, per key dimension) for its within-chunk products to be one matrix
# product of q ⊙ e^{b} and k ⊙ e^{-b}: e^30 ≈ 1e13 leaves float32 room. At initialisation a chunk spans about 0.7
# (log σ(0) / 16 a position); a chunk beyond it takes the (C, C, K) decays, which never exponentiate a positive.
FAST_SPAN = 30.0


class GatedLinearAttention(MatrixMemory):
    """One GLA mixer: forward (training) runs the chunked form ``_mix``; ``_weights`` is the exact influence A
    (O(T²·K) memory), which ``influence`` and the analyses read; ``step`` runs the recurrence ``_recur``."""

    def __init__(self, d_model: int, n_heads: int, d_key: int, d_value: int, conv_kernel: int) -> None:
        super().__init__(d_model, n_heads, d_key, d_value, conv_kernel, gate=True)
        self.gate_proj = nn.Sequential(nn.Linear(d_model, GATE_RANK, bias=False), nn.Linear(GATE_RANK, n_heads * d_key))

    def _features(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, start: int) -> Heads:
        batch, length, _ = x.shape
        log_alpha = F.logsigmoid(self.gate_proj(x)) / GATE_TEMPERATURE  # B T H·K, ≤ 0
        log_alpha = log_alpha.reshape(batch, length, self.n_heads, self.d_key).transpose(1, 2)  # B H T K
        return Heads(q, k * self.d_key**-0.5, v, {"log_alpha": log_alpha})

    def _weights(self, heads: Heads) -> torch.Tensor:
        batch, n_heads, length, width = heads.q.shape
        fits_in_memory("GLA's decays", 3 * heads.q.element_size() * batch * n_heads * width * length**2,
                       batch=batch, length=length)
        # log Π_{s<j≤t} α_j = c_t - c_s with c the cumulative log-gate: half the time of summing each segment
        # (segment_sums), exact to rounding in c (float64: the parallel and recurrent forms agree to 1e-10)
        cumulative = heads.gates["log_alpha"].cumsum(dim=2)  # B H T K
        causal = torch.ones(length, length, dtype=torch.bool, device=cumulative.device).tril()  # T T
        log_decay = cumulative[:, :, :, None] - cumulative[:, :, None]  # B H T S K
        decay = log_decay.masked_fill(~causal[:, :, None], float("-inf")).exp()  # 0 above the diagonal
        return (heads.q[:, :, :, None] * decay * heads.k[:, :, None]).sum(-1)  # B H T T

    def _mix(self, heads: Heads) -> torch.Tensor:
        """The chunked form that training computes (``chunked_form``), equal to ``_weights(heads) @ heads.v``. The
        sums within a chunk are one matrix product of q ⊙ e^{b} and k ⊙ e^{-b} when every chunk spans at most
        ``FAST_SPAN`` of log decay (``_fits_one_product``); otherwise they are built from the (C, C, K) decays
        e^{b_r - b_i}, whose exponents are all ≤ 0, since e^{-b_i} alone would overflow when gates nearly close."""
        length = heads.q.shape[2]
        size = min(CHUNK, length)
        q, k, v = (chunked(x, size) for x in (heads.q, heads.k, heads.v))  # B H N C K|V
        b = chunked(heads.gates["log_alpha"], size).cumsum(dim=3)  # B H N C K, ≤ 0
        if _fits_one_product(b, q):
            within = ((q * torch.exp(b)) @ (k * torch.exp(-b)).transpose(-1, -2)).tril()  # B H N C C
        else:
            causal = torch.ones(size, size, dtype=torch.bool, device=b.device).tril()  # C C
            log_decay = b[:, :, :, :, None] - b[:, :, :, None]  # B H N C C K: b_r - b_i, ≤ 0 for i ≤ r
            decay = log_decay.masked_fill(~causal[:, :, None], float("-inf")).exp()  # 0 above the diagonal
            within = (q[:, :, :, :, None] * decay * k[:, :, :, None]).sum(-1)  # B H N C C
        return chunked_form(q, k, v, b, within).flatten(2, 3)[:, :, :length]  # B H T V

    def _initial(self, batch_size: int, like: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"S": like.new_zeros(batch_size, self.n_heads, self.d_key, self.d_value)}

    def _recur(self, heads: Heads, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        alpha = torch.exp(heads.gates["log_alpha"])[..., None]  # B H K 1
        memory = alpha * state["S"] + heads.k[..., None] * heads.v[..., None, :]  # B H K V
        return torch.einsum("bhk,bhkv->bhv", heads.q, memory), {"S": memory}


def _fits_one_product(b: torch.Tensor, q: torch.Tensor) -> bool:
    """Whether the chunks' cumulative log gates b (B, H, N, C, K) span at most FAST_SPAN and the product runs in at
    least float32 (not half precision, nor cast to it by autocast), so that k ⊙ e^{-b} cannot overflow."""
    full = q.dtype in (torch.float32, torch.float64) and not torch.is_autocast_enabled(q.device.type)
    return full and bool(-b[:, :, :, -1].min() <= FAST_SPAN)


class GLABackbone(MatrixMemoryBackbone):
    """Gated linear attention (Yang et al. 2024) in pre-norm blocks with a GELU MLP, then a final RMSNorm.

    Arguments as ``MatrixMemoryBackbone``'s. Training runs the chunked form, O(T·K·(C + V)) per head; ``influence``
    builds the exact (B, H, T, T) influence through (B, H, T, T, K) decays, and refuses a length beyond memory in one
    line."""

    def _mixer(self, d_model: int, n_heads: int, d_key: int, d_value: int, conv_kernel: int) -> MatrixMemory:
        return GatedLinearAttention(d_model, n_heads, d_key, d_value, conv_kernel)
