"""Linear attention (Katharopoulos, Vyas, Pappas & Fleuret 2020, "Transformers are RNNs"): softmax replaced by a
positive feature map φ(x) = elu(x) + 1, so attention is a running sum.

    S_t = S_{t-1} + φ(k_t) v_tᵀ,   z_t = z_{t-1} + φ(k_t),   o_t = S_tᵀ φ(q_t) / (z_t · φ(q_t))
    A[t, s] = φ(q_t) · φ(k_s) / Σ_{s'≤t} φ(q_t) · φ(k_s')   for s ≤ t

Training computes the chunked form (``LinearAttention._mix``): O(T·C) per head instead of the parallel form's O(T²),
which ``_weights`` builds as the exact token-to-token influence the analyses read. They agree to rounding in float64
(tests/backbones/matrix_memory/test_matrix_memory.py).

Legend: B batch, T time, H heads, K key width, V value width, D model width, N chunks, C positions per chunk.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from primacy.backbones.matrix_memory import CHUNK, Heads, MatrixMemory, MatrixMemoryBackbone, chunked, chunked_form


class LinearAttention(MatrixMemory):
    """The mixer: no gates, no output norm or gate (as in the paper)."""

    def _features(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, start: int) -> Heads:
        return Heads(F.elu(q) + 1, F.elu(k) + 1, v, {})

    def _weights(self, heads: Heads) -> torch.Tensor:
        scores = (heads.q @ heads.k.transpose(-1, -2)).tril()  # B H T T, all > 0 on and below the diagonal
        return scores / scores.sum(-1, keepdim=True)

    def _mix(self, heads: Heads) -> torch.Tensor:
        """The chunked form that training computes (``chunked_form``), equal to ``_weights(heads) @ heads.v``: the
        values carry a column of ones, so the same products give both S_tᵀ φ(q_t) and the normaliser z_t · φ(q_t)."""
        length = heads.q.shape[2]
        size = min(CHUNK, length)
        ones = heads.v.new_ones(*heads.v.shape[:3], 1)  # B H T 1
        q, k, v = (chunked(x, size) for x in (heads.q, heads.k, torch.cat([heads.v, ones], dim=-1)))  # B H N C K|V+1
        within = (q @ k.transpose(-1, -2)).tril()  # B H N C C
        o = chunked_form(q, k, v, None, within).flatten(2, 3)[:, :, :length]  # B H T V+1
        return o[..., :-1] / o[..., -1:]  # B H T V

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
