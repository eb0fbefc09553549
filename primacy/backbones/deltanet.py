"""DeltaNet (Schlag, Irie & Schmidhuber 2021, "Linear transformers are secretly fast weight programmers"; Yang, Wang,
Zhang, Shen & Kim 2024, "Parallelizing linear transformers with the delta rule over sequence length") and gated
DeltaNet (Yang, Kautz & Hatamizadeh 2024): the memory is corrected towards each new value by the delta rule instead
of only added to, and with ``gated`` it also decays by a data-dependent scalar per head.

    S_t = α_t (I - β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ,   o_t = S_tᵀ q_t       (α_t = 1 without the gate)

q and k pass a SiLU and are L2-normalised (q also scaled by K^(-1/2)), β_t = σ(w_β · x_t) per head, and
log α_t = -exp(a_h) · softplus(w_α · x_t + b_h) per head (Mamba-2's parametrisation, which gated DeltaNet uses).

The parallel form is exact: with Γ[t, s] = Π_{s<j≤t} α_j, the values written, U = T V, solve
(I + diag(β) tril(Γ ⊙ K Kᵀ, -1)) U = diag(β) V (a unit lower triangular system), and O = tril(Γ ⊙ Q Kᵀ) U, so

    A = tril(Γ ⊙ Q Kᵀ) (I + diag(β) tril(Γ ⊙ K Kᵀ, -1))⁻¹ diag(β),

the token-to-token influence, content-dependent through both the keys and the corrections between them.

Legend: B batch, T time, H heads, K key width, V value width, D model width.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from primacy.backbones.influence import segment_sums
from primacy.backbones.matrix_memory import Heads, MatrixMemory, MatrixMemoryBackbone


class DeltaRule(MatrixMemory):
    def __init__(self, d_model: int, n_heads: int, d_key: int, d_value: int, conv_kernel: int, gated: bool) -> None:
        super().__init__(d_model, n_heads, d_key, d_value, conv_kernel, gate=True)
        self.beta = nn.Linear(d_model, n_heads)
        self.alpha = nn.Linear(d_model, n_heads) if gated else None
        if gated:  # as Mamba-2: decay rates a = exp(a_log) in [1, 16], bias so softplus(b) spans [1e-3, 1e-1]
            self.a_log = nn.Parameter(torch.log(torch.empty(n_heads).uniform_(1, 16)))
            step = torch.exp(torch.empty(n_heads).uniform_(math.log(1e-3), math.log(1e-1)))
            self.alpha.bias.data = step + torch.log(-torch.expm1(-step))  # softplus⁻¹

    def _features(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, start: int) -> Heads:
        q = F.normalize(F.silu(q), dim=-1) * self.d_key**-0.5
        k = F.normalize(F.silu(k), dim=-1)
        gates = {"beta": torch.sigmoid(self.beta(x)).transpose(1, 2)}  # B H T
        if self.alpha is not None:
            gates["log_alpha"] = (-torch.exp(self.a_log) * F.softplus(self.alpha(x))).transpose(1, 2)  # B H T, ≤ 0
        return Heads(q, k, v, gates)

    def _weights(self, heads: Heads) -> torch.Tensor:
        length = heads.q.shape[2]
        causal = torch.ones(length, length, dtype=torch.bool, device=heads.q.device).tril()  # T T
        if "log_alpha" in heads.gates:
            decay = torch.exp(segment_sums(heads.gates["log_alpha"]))  # B H T T, 0 above the diagonal
        else:
            decay = causal.to(heads.q.dtype)
        beta = heads.gates["beta"]  # B H T
        corrections = (decay * (heads.k @ heads.k.transpose(-1, -2))).tril(-1)  # B H T T
        system = torch.eye(length, dtype=heads.q.dtype, device=heads.q.device) + beta[..., None] * corrections
        written = torch.linalg.solve_triangular(system, torch.diag_embed(beta), upper=False,
                                                unitriangular=True)  # B H T T: U = written @ V
        return ((decay * (heads.q @ heads.k.transpose(-1, -2))).masked_fill(~causal, 0.0)) @ written

    def _initial(self, batch_size: int, like: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"S": like.new_zeros(batch_size, self.n_heads, self.d_key, self.d_value)}

    def _recur(self, heads: Heads, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        memory, k, beta = state["S"], heads.k, heads.gates["beta"][..., None, None]  # B H K V, B H K, B H 1 1
        if "log_alpha" in heads.gates:
            memory = torch.exp(heads.gates["log_alpha"])[..., None, None] * memory
        read = torch.einsum("bhk,bhkv->bhv", k, memory)  # B H V: what the memory holds for k_t
        memory = memory + beta * k[..., None] * (heads.v - read)[..., None, :]  # B H K V: the delta rule
        return torch.einsum("bhk,bhkv->bhv", heads.q, memory), {"S": memory}


class DeltaNetBackbone(MatrixMemoryBackbone):
    """DeltaNet, or gated DeltaNet with ``gated``, in pre-norm blocks with a GELU MLP, then a final RMSNorm.

    Args:
        d_model: width D.
        n_layers: blocks.
        n_heads: heads per block.
        d_key, d_value: per-head widths K and V; null: d_model / n_heads.
        conv_kernel: width of a causal depthwise convolution on q, k, v (4 in both papers' models); 1: none.
        gated: gated DeltaNet's scalar decay α_t per head.
        mlp: a feed-forward layer in each block.
        d_ff: its width; null: 4·d_model.
    """

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 4, d_key: int | None = None,
                 d_value: int | None = None, conv_kernel: int = 4, gated: bool = False, mlp: bool = True,
                 d_ff: int | None = None) -> None:
        self.gated = gated
        super().__init__(d_model, n_layers, n_heads, d_key, d_value, conv_kernel, mlp, d_ff)

    def _mixer(self, d_model: int, n_heads: int, d_key: int, d_value: int, conv_kernel: int) -> MatrixMemory:
        return DeltaRule(d_model, n_heads, d_key, d_value, conv_kernel, self.gated)
