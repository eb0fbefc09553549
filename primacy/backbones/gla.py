"""Gated linear attention (Yang, Wang, Shen, Panda & Kim 2024, "Gated linear attention transformers with
hardware-efficient training"): linear attention whose memory decays by a data-dependent gate per key dimension.

    S_t = diag(α_t) S_{t-1} + k_t v_tᵀ,   o_t = S_tᵀ q_t
    A[t, s] = Σ_d q_t[d] k_s[d] Π_{s<j≤t} α_j[d]   for s ≤ t

with α_t = σ(W₂ W₁ x_t + b)^(1/τ), τ = 16, W₁ of rank 16 (the paper's parametrisation), k scaled by K^(-1/2), and a
per-head norm and SiLU output gate.

Legend: B batch, T time, H heads, K key width, V value width, D model width, R the gate's rank.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from primacy.backbones.matrix_memory import Heads, MatrixMemory, MatrixMemoryBackbone
from primacy.checks import fits_in_memory

GATE_RANK, GATE_TEMPERATURE = 16, 16.0


class GatedLinearAttention(MatrixMemory):
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

    def _initial(self, batch_size: int, like: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"S": like.new_zeros(batch_size, self.n_heads, self.d_key, self.d_value)}

    def _recur(self, heads: Heads, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        alpha = torch.exp(heads.gates["log_alpha"])[..., None]  # B H K 1
        memory = alpha * state["S"] + heads.k[..., None] * heads.v[..., None, :]  # B H K V
        return torch.einsum("bhk,bhkv->bhv", heads.q, memory), {"S": memory}


class GLABackbone(MatrixMemoryBackbone):
    """Gated linear attention (Yang et al. 2024) in pre-norm blocks with a GELU MLP, then a final RMSNorm.

    Arguments as ``MatrixMemoryBackbone``'s. The parallel form holds (B, H, K, T, T) decays, so a length beyond memory
    is refused in one line."""

    def _mixer(self, d_model: int, n_heads: int, d_key: int, d_value: int, conv_kernel: int) -> MatrixMemory:
        return GatedLinearAttention(d_model, n_heads, d_key, d_value, conv_kernel)
