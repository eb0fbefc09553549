"""Linear attention (Katharopoulos, Vyas, Pappas & Fleuret 2020, "Transformers are RNNs"): softmax replaced by a
positive feature map φ(x) = elu(x) + 1, so attention is a running sum.

    S_t = S_{t-1} + φ(k_t) v_tᵀ,   z_t = z_{t-1} + φ(k_t),   o_t = S_tᵀ φ(q_t) / (z_t · φ(q_t))
    A[t, s] = φ(q_t) · φ(k_s) / Σ_{s'≤t} φ(q_t) · φ(k_s')   for s ≤ t

Legend: B batch, T time, H heads, K key width, V value width, D model width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from primacy.backbones.matrix_memory import Heads, MatrixMemory, MatrixMemoryBackbone


class LinearAttention(MatrixMemory):
    """The mixer: no gates, no output norm or gate (as in the paper)."""

    def _features(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, start: int) -> Heads:
        return Heads(F.elu(q) + 1, F.elu(k) + 1, v, {})

    def _weights(self, heads: Heads) -> torch.Tensor:
        scores = (heads.q @ heads.k.transpose(-1, -2)).tril()  # B H T T, all > 0 on and below the diagonal
        return scores / scores.sum(-1, keepdim=True)

    def _initial(self, batch_size: int, like: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"S": like.new_zeros(batch_size, self.n_heads, self.d_key, self.d_value),
                "z": like.new_zeros(batch_size, self.n_heads, self.d_key)}

    def _recur(self, heads: Heads, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        memory = state["S"] + heads.k[..., None] * heads.v[..., None, :]  # B H K V
        z = state["z"] + heads.k  # B H K
        o = torch.einsum("bhk,bhkv->bhv", heads.q, memory) / (heads.q * z).sum(-1, keepdim=True)  # B H V
        return o, {"S": memory, "z": z}


class LinearAttentionBackbone(MatrixMemoryBackbone):
    """Linear attention (Katharopoulos et al. 2020) in pre-norm blocks with a GELU MLP, then a final RMSNorm.

    Arguments as ``MatrixMemoryBackbone``'s (conv_kernel 1, no convolution, as in the paper)."""

    def _mixer(self, d_model: int, n_heads: int, d_key: int, d_value: int, conv_kernel: int) -> MatrixMemory:
        return LinearAttention(d_model, n_heads, d_key, d_value, conv_kernel, gate=False)
