"""DeltaNet (Schlag, Irie & Schmidhuber 2021, "Linear transformers are secretly fast weight programmers"; Yang, Wang,
Zhang, Shen & Kim 2024, "Parallelizing linear transformers with the delta rule over sequence length") and gated
DeltaNet (Yang, Kautz & Hatamizadeh 2024): the memory is corrected towards each new value by the delta rule instead
of only added to, and with ``gated`` it also decays by a data-dependent scalar per head.

    S_t = α_t (I - β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ,   o_t = S_tᵀ q_t       (α_t = 1 without the gate)

q and k pass a SiLU and are L2-normalised (q also scaled by K^(-1/2)), β_t = σ(w_β · x_t) per head, and
log α_t = -exp(a_h) · softplus(w_α · x_t + b_h) per head (Mamba-2's parametrisation, which gated DeltaNet uses).

Training computes the chunked form (``DeltaRule._mix``; Yang et al. 2024, with gated DeltaNet's decay): the sequence
is cut into chunks of ``CHUNK`` positions, the state S is carried from chunk to chunk, and inside a chunk a unit lower
triangular solve of size ``CHUNK`` gives the values written (the WY/UT representation). Its cost is O(T·C) per head
instead of O(T²), and it builds nothing larger than C × C per head and chunk.

The parallel form (``_weights``) is exact too, and is what the analyses read: with Γ[t, s] = Π_{s<j≤t} α_j, the
values written, U = T V, solve (I + diag(β) tril(Γ ⊙ K Kᵀ, -1)) U = diag(β) V (a unit lower triangular system of size
T), and O = tril(Γ ⊙ Q Kᵀ) U, so

    A = tril(Γ ⊙ Q Kᵀ) (I + diag(β) tril(Γ ⊙ K Kᵀ, -1))⁻¹ diag(β),

the token-to-token influence, content-dependent through both the keys and the corrections between them. The chunked
form equals A V to rounding in float64 (tests/backbones/matrix_memory/test_deltanet_chunked.py).

Legend: B batch, T time, H heads, K key width, V value width, D model width, N chunks, C positions per chunk.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from primacy.backbones.influence import segment_sums
from primacy.backbones.matrix_memory import Heads, MatrixMemory, MatrixMemoryBackbone, chunked

CHUNK = 16  # positions per chunk of the chunked form: a C × C solve per chunk, T / C sequential steps of the state



def _chunk_decays(log_alpha: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log gates (B, H, N, C) -> within each chunk Γ[r, i] = Π_{i<j≤r} α_j (B, H, N, C, C), 0 above the diagonal, and
    the decay from the chunk's start γ_r = Π_{j≤r} α_j (B, H, N, C). Every exponent is a sum of log gates, ≤ 0."""
    within = torch.exp(segment_sums(log_alpha))  # B H N C C
    return within, torch.exp(log_alpha.cumsum(dim=-1))  # B H N C C, B H N C


def _across_chunks(fresh: torch.Tensor, wy: torch.Tensor, k_end: torch.Tensor,
                   kept: Sequence[torch.Tensor | None]) -> tuple[torch.Tensor, torch.Tensor]:
    """The one sequential part of the chunked form: from Ũ (B, H, N, C, V), W (B, H, N, C, K), the keys as each
    chunk's end sees them (B, H, N, C, K) and γ_C per chunk (N × (B, H, 1, 1), or None without a gate), each chunk's
    state before it S_0 (B, H, N, K, V) and the values it writes U = Ũ - W S_0 (B, H, N, C, V)."""
    memory = fresh.new_zeros(*fresh.shape[:2], wy.shape[-1], fresh.shape[-1])  # B H K V: S_0 of the first chunk
    starts, written = [], []
    for fresh_n, wy_n, k_end_n, kept_n in zip(fresh.unbind(2), wy.unbind(2), k_end.unbind(2), kept, strict=True):
        starts.append(memory)
        written.append(fresh_n - wy_n @ memory)  # B H C V
        carried = k_end_n.transpose(-1, -2) @ written[-1]  # B H K V
        memory = carried + (memory if kept_n is None else kept_n * memory)
    return torch.stack(starts, dim=2), torch.stack(written, dim=2)  # B H N K V, B H N C V


class DeltaRule(MatrixMemory):
    """The delta rule's mixer: training runs the chunked form (``_mix``); ``_weights`` is the exact token-to-token
    influence A that the analyses read (``influence``), and ``_recur`` what ``step`` runs."""

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
        """A (B, H, T, T), the exact token-to-token influence the analyses read (a solve of size T per head); not
        what training computes, which is ``_mix``, the same map by chunks."""
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

    def _mix(self, heads: Heads) -> torch.Tensor:
        """The chunked form that training computes, equal to ``_weights(heads) @ heads.v``. In a chunk whose state
        before it is S_0, with γ_r and Γ from ``_chunk_decays``, position r's state is
        S_r = γ_r S_0 + Σ_{i≤r} Γ[r, i] k_i u_iᵀ, whose values written u_r = β_r (v_r - α_r S_{r-1}ᵀ k_r) solve

            (I + diag(β) tril(Γ ⊙ K Kᵀ, -1)) U = diag(β) V - diag(β γ) K S_0,   so U = Ũ - W S_0

        with Ũ and W from one unit lower triangular solve of size C (independent of S_0, so all chunks solve at
        once). Then O = diag(γ) Q S_0 + (Γ ⊙ Q Kᵀ) U, and the next chunk's S_0 is γ_C S_0 + (diag(Γ[C, :]) K)ᵀ U."""
        length = heads.q.shape[2]
        size = min(CHUNK, length)
        q, k, v = (chunked(x, size) for x in (heads.q, heads.k, heads.v))  # B H N C K|V
        beta = chunked(heads.gates["beta"], size)[..., None]  # B H N C 1
        if "log_alpha" in heads.gates:
            within, from_start = _chunk_decays(chunked(heads.gates["log_alpha"], size))  # B H N C C, B H N C
            kept = from_start[..., -1, None, None].unbind(2)  # N × (B H 1 1): γ_C, what of S_0 the chunk keeps
            q_0, k_0 = from_start[..., None] * q, from_start[..., None] * k  # B H N C K: as they see S_0
            k_end = within[..., -1, :, None] * k  # B H N C K: as the chunk's end sees them, Γ[C, i] k_i
        else:
            within = torch.ones(size, size, dtype=q.dtype, device=q.device).tril()  # C C
            kept, q_0, k_0, k_end = [None] * q.shape[2], q, k, k
        eye = torch.eye(size, dtype=q.dtype, device=q.device)
        system = eye + beta * (within * (k @ k.transpose(-1, -2))).tril(-1)  # B H N C C
        rhs = beta * torch.cat([v, k_0], dim=-1)  # B H N C V+K
        solved = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)  # B H N C V+K
        fresh, wy = solved.split([v.shape[-1], k.shape[-1]], dim=-1)  # B H N C V: Ũ, B H N C K: W
        starts, written = _across_chunks(fresh, wy, k_end, kept)  # B H N K V, B H N C V
        o = q_0 @ starts + (within * (q @ k.transpose(-1, -2))) @ written  # B H N C V
        return o.flatten(2, 3)[:, :, :length]  # B H T V

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
