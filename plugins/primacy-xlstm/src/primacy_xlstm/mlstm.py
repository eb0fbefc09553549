"""The mLSTM over a sequence in chunks: xlstm's stabilised parallel form within a chunk, the recurrent state across.

What it computes: per head of width d, for positions s ≤ t of a sequence of length T,

    h̃_t = Σ_s C[t, s] v_s / (max(|Σ_s C[t, s]|, exp(−m_t)) + eps),
    C[t, s] = (q_t · k_s / √d) · exp(F[t, s] + ĩ_s − m_t),   F[t, s] = Σ_{s<j≤t} log σ(f̃_j),
    m_t = max_{s≤t} (F[t, s] + ĩ_s) = max(m_{t−1} + log σ(f̃_t), ĩ_t)   (m_{−1} = −∞),

which is what xlstm's ``parallel_stabilized_simple`` computes (with ``stabilize_rowwise``), the function
``mLSTMCell.forward`` calls. The sequence is cut into chunks of C positions. With b_r = Σ_{a≤j≤r} log σ(f̃_j), the log
forget gates summed from the chunk's first position a, and the state carried from the chunk before, stabilised by
that chunk's last row maximum M = m_{a−1},

    S = Σ_{s<a} exp(F[a−1, s] + ĩ_s − M) k_s v_sᵀ / √d   (d × d_v),   n = Σ_{s<a} exp(F[a−1, s] + ĩ_s − M) k_s / √d,

a row r of the chunk is

    m_r = max(b_r + M, max_{a≤s≤r} (b_r − b_s + ĩ_s)),   λ_r = exp(b_r + M − m_r),
    h̃_r = (Σ_{a≤s≤r} C[r, s] v_s + λ_r q_r S) / (max(|Σ_{a≤s≤r} C[r, s] + λ_r q_r · n|, exp(−m_r)) + eps),

and the state after the chunk (last row e, its maximum m_e; W = max_s (b_e − b_s + ĩ_s), the chunk's own) is

    S' = exp(b_e + M − m_e) S + exp(W − m_e) Σ_s exp(b_e − b_s + ĩ_s − W) k_s v_sᵀ / √d,   n' alike,   M' = m_e:

the recurrent update of ``recurrent_step_stabilized_simple`` applied a chunk at a time, from m = −∞ (xlstm's step
starts at m = 0, which changes eps's share of the normaliser; the parallel form's row maximum is the m wanted here).
The first chunk has no state (λ = 0), and a T ≤ C is one chunk.

As computed: with a_s = ĩ_s − b_s and g_r = m_r − b_r = max(M, max_{a≤s≤r} a_s) (a running maximum over the chunk),
the exponents are b_r − b_s + ĩ_s − m_r = a_s − g_r, b_r + M − m_r = M − g_r and W − m_e, each a candidate of the
maximum it is stabilised by minus that maximum, so ≤ 0 (the (C, C) ones are masked to −∞ above the diagonal before
exp); only exp(−m_r) is not, as in xlstm. S and n are kept side by side, a d × (d_v + 1) matrix (S | n), by giving v a
column of ones, so that one product gives Σ_s C[r, s] v_s and Σ_s C[r, s]. Rounding: a and g hold a chunk's sum of
log σ(f̃), so in float32 an exponent is off by about C · max |log σ(f̃)| · 2⁻²⁴; xlstm's F[t, s] is a difference of
sums over the whole sequence, off by about T · max |log σ(f̃)| · 2⁻²⁴.

Why: the parallel form builds (B, H, T, T) matrices, about ten elementwise passes over them forward and backward,
O(T²) time and memory; this builds (B, H, T, C) ones and carries a d × (d_v + 1) state between T / C chunks. Measured
(one CPU thread, B = 64, H = 4, d = 32, forward and backward): T = 256, 1.13 s → 0.14 s; T = 64, 37 → 26 ms.

What it must equal: ``parallel_stabilized_simple`` on the same arguments, to rounding (float64: outputs ≤ 1e-10,
gradients with respect to q, k, v and both gate pre-activations ≤ 1e-8; ``tests/test_mlstm_chunkwise.py``). Its
maxima keep their gradient, as xlstm's ``torch.max`` does (no detach): m_t is the same candidate F[t, s*] + ĩ_s* in
both forms, so its gradient reaches the same gates. Where the arguments ask for something else, it calls xlstm's
function: ``stabilize_rowwise=False`` (one maximum over the whole matrix changes eps's share of the normaliser) and a
causal mask shorter than T (xlstm's refusal). Any other ``lower_triangular_matrix`` is taken to be the causal mask,
as ``mLSTMCell`` gives it.

``ChunkwisemLSTMCell`` is xlstm's cell computing its forward pass this way, and ``FastmLSTMLayer`` xlstm's layer
projecting q, k, v straight into the cell's per-head layout (its docstring says why); ``XLSTMBackbone`` builds both.
Measured (one CPU thread, B = 64, T = 256, d_model = 64, one mLSTM block, forward and backward, with the backbone's
faster components): xlstm's layer with this cell 407 ms, with ``FastmLSTMLayer`` 252 ms (with the components alone,
about 300 ms).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from primacy.backbones.matrix_memory import chunked
from torch.nn.functional import linear, logsigmoid
from xlstm.blocks.mlstm.backends import parallel_stabilized_simple
from xlstm.blocks.mlstm.cell import mLSTMCell
from xlstm.blocks.mlstm.layer import mLSTMLayer
from xlstm.components.linear_headwise import LinearHeadwiseExpand
from xlstm.components.ln import MultiHeadLayerNorm

from primacy_xlstm.mlstm_compiled import conv_silu_compiled, mlstm_compiled, mlstm_layer_compiled, mlstm_tail_compiled

# the mlstm_loop settings that run the compiled cell
COMPILED_CELLS = ("compiled", "compiled_qkv", "compiled_conv", "compiled_layer")
IN_THE_KERNEL = ("compiled_qkv", "compiled_conv", "compiled_layer")  # those that form q, k, v inside it
CONV_COMPILED = ("compiled_conv", "compiled_layer")  # those that compile the convolution and its SiLU too

# positions per chunk, by measurement (one CPU thread, B = 64, H = 4, d = 32): the mLSTM's forward and backward at
# T = 256 take 202, 141, 177 ms at C = 16, 32, 64 (an xLSTM training step 951, 771, 902 ms; C = 128: 1038); at T = 64,
# 33, 26, 26 ms (steps equal within noise). That is the largest chunk: with more heads of the same inner width 128
# (smaller d), a chunk's (C, C) matrices per head cost more than the state they save, and C = d does best (median ms
# of the forward and backward at T = 96, C = 4, 8, 16, 32; d = 32: 220, 98, 74, 73; d = 16: 106, 63, 48, 68;
# d = 8: 184, 93, 92, 140; d = 4: 265, 271, 261, 377; d = 2: 340, 371, 408, 849), but never below 8.
CHUNK = 32
SMALLEST_CHUNK = 8


def chunk_for(head_dim: int) -> int:
    """The chunk length for heads of ``head_dim`` (measured above): the head dimension, between 8 and 32."""
    return min(CHUNK, max(SMALLEST_CHUNK, head_dim))


def mlstm_chunkwise(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    igate_preact: torch.Tensor,
    fgate_preact: torch.Tensor,
    lower_triangular_matrix: torch.Tensor | None = None,
    stabilize_rowwise: bool = True,
    eps: float = 1e-6,
    chunk_size: int | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    """xlstm's ``parallel_stabilized_simple`` (same arguments, same result h̃), computed in chunks of ``chunk_size``
    positions (module docstring).

    Args:
        queries, keys: B H T d.
        values: B H T d_v (any d_v: the influence calls it with the identity).
        igate_preact, fgate_preact: B H T 1, the gates' pre-activations ĩ, f̃.
        lower_triangular_matrix: the causal mask (T' T', T' ≥ T) or None.
        stabilize_rowwise: False is xlstm's other stabiliser, computed by xlstm's function.
        eps: added to the normaliser.
        chunk_size: C (default ``chunk_for(d)``).

    Returns:
        B H T d_v.
    """
    length = queries.shape[2]
    short_mask = lower_triangular_matrix is not None and length > lower_triangular_matrix.size(-1)
    if not stabilize_rowwise or short_mask:
        return parallel_stabilized_simple(queries, keys, values, igate_preact, fgate_preact, lower_triangular_matrix,
                                          stabilize_rowwise, eps, **kwargs)
    size = min(chunk_size or chunk_for(queries.shape[-1]), length)
    q = chunked(queries, size)  # B H N C d, the last chunk padded with zeros (as every chunked input)
    k = chunked(keys / math.sqrt(keys.shape[-1]), size)  # B H N C d
    v = chunked(torch.cat([values, values.new_ones(*values.shape[:3], 1)], dim=-1), size)  # B H N C d_v+1: v_s, 1
    b = chunked(logsigmoid(fgate_preact), size)[..., 0].cumsum(-1)  # B H N C: b_r, ≤ 0
    a = chunked(igate_preact, size)[..., 0] - b  # B H N C: ĩ_s − b_s
    own = a.cummax(dim=-1).values  # B H N C: max_{a≤s≤r} (b_r − b_s + ĩ_s) − b_r, the chunk's own row maxima
    if q.shape[2] == 1:  # one chunk: no state
        g = own  # B H 1 C: m_r − b_r
    else:
        carried, m_carried = _states(k[:, :, :-1], v[:, :, :-1], a[:, :, :-1], own[:, :, :-1, -1], b[:, :, :-1, -1])
        g = torch.maximum(m_carried[..., None], own)  # B H N C: m_r − b_r (m_r = max(b_r + M, b_r + own_r))
    causal = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()  # C C
    log_d = (a[..., None, :] - g[..., :, None]).masked_fill(~causal, -math.inf)  # B H N C C: b_r − b_s + ĩ_s − m_r
    c = (q @ k.transpose(-1, -2)) * torch.exp(log_d)  # B H N C C: C[r, s], 0 for s > r
    mixed = c @ v  # B H N C d_v+1: Σ_s C[r, s] v_s and Σ_s C[r, s]
    if q.shape[2] > 1:
        kept = torch.exp(m_carried[..., None] - g)  # B H N C: λ_r = exp(b_r + M − m_r) ≤ 1, 0 in the first chunk
        mixed = mixed + (q * kept[..., None]) @ carried  # B H N C d_v+1: + λ_r q_r S, λ_r q_r · n
    numerator, total = mixed.split([mixed.shape[-1] - 1, 1], dim=-1)  # one split: its backward is one copy
    normaliser = torch.maximum(total.abs(), torch.exp(-(b + g))[..., None]) + eps  # B H N C 1
    return (numerator / normaliser).flatten(2, 3)[:, :, :length]  # B H T d_v


def _states(k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, own: torch.Tensor, decay: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The state before each of N chunks (module docstring), S and n side by side, (S | n), and its stabiliser M,
    from the first N − 1 chunks' keys k (B, H, N−1, C, d), values with a column of ones v (B, H, N−1, C, d_v+1),
    log write weights relative to the chunk a = ĩ_s − b_s (B, H, N−1, C), their maximum W − b_e (B, H, N−1) and
    whole log forget gates b_e (B, H, N−1). Returns (S | n) (B, H, N, d, d_v+1) and M (B, H, N), the first chunk's 0
    and −∞."""
    k_written = k * torch.exp(a - own[..., None])[..., None]  # B H N-1 C d: k_s exp(b_e − b_s + ĩ_s − W), ≤ 1
    writes = k_written.transpose(-1, -2) @ v  # B H N-1 d d_v+1: a chunk's own (S | n), stabilised by W
    memory = writes.new_zeros(*writes.shape[:2], *writes.shape[3:])  # B H d d_v+1
    m_memory = own.new_full(own.shape[:2], -math.inf)  # B H: no state yet
    memories, stabilisers = [memory], [m_memory]
    # unbind, not an index per chunk: one backward for all chunks, not a full-size gradient for each
    for own_max, write_own, whole in zip(own.unbind(2), writes.unbind(2), decay.unbind(2)):
        g_end = torch.maximum(m_memory, own_max)  # B H: m_e − b_e
        keep = torch.exp(m_memory - g_end)[..., None, None]  # B H 1 1: exp(b_e + M − m_e) ≤ 1, 0 on the first chunk
        write = torch.exp(own_max - g_end)[..., None, None]  # B H 1 1: exp(W − m_e) ≤ 1
        memory = keep * memory + write * write_own  # B H d d_v+1
        m_memory = whole + g_end  # B H: m_e
        memories.append(memory)
        stabilisers.append(m_memory)
    return torch.stack(memories, dim=2), torch.stack(stabilisers, dim=2)


class ChunkwisemLSTMCell(mLSTMCell):
    """xlstm's ``mLSTMCell`` (same parameters, buffers and state dict) whose forward pass calls ``mlstm_chunkwise``
    where xlstm's calls ``parallel_stabilized_simple`` (training and evaluation alike), while ``backend_fn`` is that
    function, as built, or ``mlstm_compiled`` (the same map as a compiled recurrence: primacy_xlstm.mlstm_compiled)
    where ``mlstm_loop`` (an attribute, not in the state dict; ``XLSTMBackbone`` sets it) is ``compiled`` (except under
    autocast, where the chunkwise form takes its lower-precision tensors, as the sLSTM cell runs xlstm's loop). A
    ``backend_fn`` set by anyone else (``XLSTMBackbone``'s influence, which records the parallel form's calls; a test)
    is called as it is. Its gates ``igate`` and ``fgate`` are applied as one linear map (same values). ``step`` is
    xlstm's."""

    mlstm_loop = "pytorch"

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """mLSTMCell.forward: q, k, v (B, T, H·d) -> the per-head normalised h̃ (B, T, H·d)."""
        batch, length, _ = q.shape
        weight, bias = self.gate_weights()
        gates = linear(torch.cat([q, k, v], dim=-1), weight, bias)  # B T 2H
        q, k, v = (x.view(batch, length, self.config.num_heads, -1).transpose(1, 2) for x in (q, k, v))  # B H T d
        return self.mix(q, k, v, gates)

    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
        """The cell's output from q, k, v (B, H, T, d) and both gates' pre-activations (ĩ | f̃) (B, T, 2H): h̃ by
        ``backend_fn`` (``mlstm_chunkwise`` in its place, see the class), then ``outnorm``, as (B, T, H·d)."""
        backend = self.backend_fn
        if backend is parallel_stabilized_simple:
            # under autocast (bfloat16 q, k, v) the chunkwise form, as the sLSTM cell runs xlstm's loop then
            compiled = self.mlstm_loop in COMPILED_CELLS and not torch.is_autocast_enabled(q.device.type)
            backend = mlstm_compiled if compiled else mlstm_chunkwise
        batch, heads, length, _ = q.shape
        gates = gates.transpose(-1, -2)[..., None]  # B 2H T 1: ĩ of each head, then f̃
        h = backend(
            queries=q, keys=k, values=v, igate_preact=gates[:, :heads], fgate_preact=gates[:, heads:],
            lower_triangular_matrix=self.causal_mask,
        )  # B H T d
        return self.outnorm(h).transpose(1, 2).reshape(batch, length, -1)  # B T H·d

    def gate_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``igate`` and ``fgate`` as one linear map of (q | k | v) (B, T, 3·H·d) to (ĩ | f̃) (B, T, 2H), its weight
        (2H, 3·H·d) and bias (2H): the input is read once and its gradient is one product, not the sum of two."""
        return torch.cat([self.igate.weight, self.fgate.weight]), torch.cat([self.igate.bias, self.fgate.bias])


class FastmLSTMLayer(mLSTMLayer):
    """xlstm's ``mLSTMLayer`` (same parameters and state dict) whose forward, with a ``ChunkwisemLSTMCell`` and
    headwise projections that fit within the cell's heads (``_fast_path``), keeps q, k, v in the cell's (B, H, T, d)
    layout from the start.

    Why: xlstm projects q, k, v (each block-diagonal: ``qkv_proj_blocksize`` = 4 wide blocks) in (B, T, H·d), and the
    cell then views them per head, (B, H, T, d), which every product over positions copies to contiguous memory
    (and their gradients back); its gates read the concatenation (q | k | v). Here the inputs of the projections,
    the convolution's activated output and x_mlstm, are copied per head once each, and each projection is one
    batched product per head with that head's (d, d) block-diagonal matrix, which is all of the projection that
    reaches the head since its blocks lie within heads (4 times fewer products than the dense block-diagonal
    matrix). The gates, a linear map of (q | k | v), are computed from those inputs with the products of matrices
    (the gate's weight times each projection's), so (q | k | v) is never formed. The cell is not called as a module
    but through ``mix`` (its ``backend_fn`` and ``outnorm`` are, so ``XLSTMBackbone``'s influence and ablation see
    them); a hook on the cell makes the layer xlstm's. With ``mlstm_loop='compiled_qkv'`` (``_in_the_kernel``) not
    even that: the convolution's output and x_mlstm go to the compiled cell as they are, which forms each head's q, k,
    v from its blocks itself and writes h̃ in (B, T, H·d), the layout ``outnorm`` copies to anyway
    (``primacy_xlstm.mlstm_compiled.mlstm_layer_compiled``; measured, one CPU thread, B 64, T 64, D 64, thread
    time: the mLSTM block's step 47.7 → 42.3 ms). With ``mlstm_loop='compiled_conv'`` (``_conv_in_the_kernel``) the
    convolution and its SiLU run compiled too (``mlstm_compiled.conv_silu_compiled``: one pass forward, one backward,
    where PyTorch makes about 17 over (B, T, E); alone, B 64, T 64, E 128, thread time: 5.8 → 1.2 ms). With
    ``mlstm_loop='compiled_layer'`` (``_tail_in_the_kernel``) the output side too, the cell's per-head norm, the
    learnable skip and the SiLU gate, in the cell's kernel (``mlstm_compiled.mlstm_tail_compiled``; the atlas's xLSTM
    step 0.92 of compiled_conv's, T 64 and 256); a hook on the norm (``ablate``) leaves it to PyTorch. Up and down
    projections and ``step`` are xlstm's."""

    def forward(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """x (B, T, D) -> (B, T, D), as mLSTMLayer.forward."""
        if not self._fast_path(x):
            return super().forward(x, **kwargs)
        inner = self.config._inner_embedding_dim
        x_mlstm, z = (linear(x, weight, bias) for weight, bias in linear_halves(self.proj_up, inner))  # B T E each
        if self._conv_in_the_kernel(x):  # mlstm_loop='compiled_conv': the convolution and its SiLU compiled
            conv = self.conv1d.conv
            kept = "mlstm_conv" if self.mlstm_cell.mlstm_loop == "compiled_layer" else ""  # kept memory there
            x_conv_act = conv_silu_compiled(x_mlstm, conv.weight, conv.bias, kept=kept)  # B T E
        else:
            x_conv_act = self.conv_act_fn(self.conv1d(x_mlstm))  # B T E
        cell = self.mlstm_cell
        heads = cell.config.num_heads
        weight, bias = cell.gate_weights()  # 2H 3E, 2H
        g_q, g_k, g_v = weight.split(inner, dim=1)  # 2H E each: the gates' weights on q, k and v
        dense = [block_diagonal(proj.weight) for proj in (self.q_proj, self.k_proj, self.v_proj)]  # E E each
        gates = linear(x_conv_act, g_q @ dense[0] + g_k @ dense[1]) + linear(x_mlstm, g_v @ dense[2], bias)  # B T 2H
        if self._tail_in_the_kernel(x):  # mlstm_loop='compiled_layer': the output side in the same kernel
            norm = cell.outnorm
            h_state = mlstm_tail_compiled(x_conv_act, x_mlstm, self.q_proj.weight, self.k_proj.weight,
                                          self.v_proj.weight, gates, heads, z, self.learnable_skip, norm.weight_proxy,
                                          norm.eps)  # B T E
            return self.dropout(self.proj_down(h_state))  # B T D
        if self._in_the_kernel(x):  # q, k, v formed inside the compiled cell from the rows (mlstm_loop='compiled_qkv')
            batch, length, _ = x_mlstm.shape
            h = mlstm_layer_compiled(x_conv_act, x_mlstm, self.q_proj.weight, self.k_proj.weight, self.v_proj.weight,
                                     gates, heads)  # B T E: head h's h̃ at h·d
            h_tilde = cell.outnorm(h.view(batch, length, heads, -1).transpose(1, 2))  # B H T d, a view of B T H d
            h_tilde = h_tilde.transpose(1, 2).reshape(batch, length, -1)  # B T E
        else:
            conv_heads, mlstm_heads = (per_head(u, heads) for u in (x_conv_act, x_mlstm))  # B H T d, contiguous
            w_q, w_k, w_v = (head_blocks(proj.weight, heads) for proj in (self.q_proj, self.k_proj, self.v_proj))
            q, k, v = conv_heads @ w_q, conv_heads @ w_k, mlstm_heads @ w_v  # B H T d each
            h_tilde = cell.mix(q, k, v, gates)  # B T E
        h_state = (h_tilde + self.learnable_skip * x_conv_act) * self.ogate_act_fn(z)  # B T E
        return self.dropout(self.proj_down(h_state))  # B T D

    def _in_the_kernel(self, x: torch.Tensor) -> bool:
        """On the fast path, whether q, k, v go to the compiled cell as the rows they come from: ``mlstm_loop`` is
        ``compiled_qkv``, the cell calls xlstm's parallel form (not a recorder: the influence) and no autocast."""
        cell = self.mlstm_cell
        return (cell.mlstm_loop in IN_THE_KERNEL and cell.backend_fn is parallel_stabilized_simple
                and not torch.is_autocast_enabled(x.device.type))

    def _conv_in_the_kernel(self, x: torch.Tensor) -> bool:
        """On the fast path, whether the convolution and its SiLU run compiled: ``mlstm_loop`` is ``compiled_conv``,
        no autocast, the activation is xlstm's SiLU and the convolution a plain depthwise one that no hook watches."""
        conv, module = self.conv1d.conv, self.conv1d
        plain = (conv is not None and conv.groups == conv.in_channels == conv.out_channels and conv.dilation == (1,)
                 and conv.stride == (1,) and not module._forward_hooks and not module._forward_pre_hooks)
        return (self.mlstm_cell.mlstm_loop in CONV_COMPILED and plain and type(self.conv_act_fn) is torch.nn.SiLU
                and not torch.is_autocast_enabled(x.device.type))

    def _tail_in_the_kernel(self, x: torch.Tensor) -> bool:
        """With q, k, v in the kernel, whether the output side runs there too: ``mlstm_loop`` is ``compiled_layer``,
        the cell's norm is xlstm's per-head layer norm with a weight and no bias that no hook watches (``ablate``
        hooks it), and the output gate is xlstm's SiLU."""
        cell = self.mlstm_cell
        norm = cell.outnorm
        plain = (isinstance(norm, MultiHeadLayerNorm) and norm.weight is not None and norm.bias is None
                 and not norm._forward_hooks and not norm._forward_pre_hooks)
        return (cell.mlstm_loop == "compiled_layer" and self._in_the_kernel(x) and plain
                and type(self.ogate_act_fn) is torch.nn.SiLU)

    def _fast_path(self, x: torch.Tensor) -> bool:
        """Whether the cell is a ``ChunkwisemLSTMCell`` with no forward hook (a hook watches the cell's call, with
        xlstm's q, k, v (B, T, H·d), which this path does not make) and q, k, v are bias-free headwise projections
        whose blocks lie within the cell's heads (their number a multiple of the cell's)."""
        cell = self.mlstm_cell
        if type(cell) is not ChunkwisemLSTMCell or cell._forward_hooks or cell._forward_pre_hooks:
            return False
        heads = cell.config.num_heads
        projections = (self.q_proj, self.k_proj, self.v_proj)
        return all(isinstance(proj, LinearHeadwiseExpand) and proj.bias is None and proj.weight.shape[0] % heads == 0
                   and proj.weight.shape[1] == proj.weight.shape[2] for proj in projections)


def linear_halves(proj_up: torch.nn.Linear, inner: int) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """An up-projection's weight and bias as two linear maps, to its first ``inner`` outputs and to the rest (the
    mLSTM layer's x_mlstm and z, the feed-forward layer's gate and value), applied one by one: the gradient of the
    input is then two products added, not the two halves' gradients copied into one (the backward of a split)."""
    weights = proj_up.weight.split(inner)
    biases = proj_up.bias.split(inner) if proj_up.bias is not None else (None, None)
    return list(zip(weights, biases))


def per_head(x: torch.Tensor, heads: int) -> torch.Tensor:
    """x (B, T, H·d) as (B, H, T, d), contiguous."""
    batch, length, _ = x.shape
    return x.view(batch, length, heads, -1).transpose(1, 2).contiguous()  # B H T d


def head_blocks(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """A headwise projection's weight (NB, o, o), NB blocks, NB a multiple of H, as H matrices (H, d, d), d = NB·o/H:
    head h's block-diagonal part, transposed, so that x_h @ result[h] is the projection of head h's inputs x_h."""
    blocks, width, _ = weight.shape
    return block_diagonal(weight.view(heads, blocks // heads, width, width)).transpose(-1, -2)  # H d d


def block_diagonal(weight: torch.Tensor) -> torch.Tensor:
    """weight (..., NB, O, I), NB blocks, as the (..., NB·O, NB·I) matrix that maps block b's I inputs to its O
    outputs and nothing else: entry (b·O + o, c·I + i) is weight[b, o, i] where c = b, 0 elsewhere."""
    blocks, out_width, in_width = weight.shape[-3:]
    own = torch.eye(blocks, dtype=weight.dtype, device=weight.device)  # NB NB
    dense = weight[..., :, :, None, :] * own[:, None, :, None]  # ... NB O NB I
    return dense.reshape(*weight.shape[:-3], blocks * out_width, blocks * in_width)
