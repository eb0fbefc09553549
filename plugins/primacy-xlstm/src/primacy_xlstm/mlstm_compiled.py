"""The mLSTM cell compiled for the CPU: ``native/mlstm.cpp``, built on first use with the machine's C++ compiler
(``primacy.native.NativeLibrary``, as the sLSTM loop of ``primacy_xlstm.compiled``).

What it computes: xlstm's ``parallel_stabilized_simple`` (the map ``primacy_xlstm.mlstm`` states), as its recurrence,
one position at a time from m = −∞, per (batch element, head) with a d × d_v state S and a d state n kept in cache:

    m_t = max(m_{t−1} + log σ(f̃_t), ĩ_t),   α_t = exp(m_{t−1} + log σ(f̃_t) − m_t),   β_t = exp(ĩ_t − m_t),
    S_t = α_t S_{t−1} + β_t k̂_t v_tᵀ,   n_t = α_t n_{t−1} + β_t k̂_t,   k̂ = k / √d,
    h̃_t = S_tᵀ q_t / (max(|n_t · q_t|, exp(−m_t)) + eps),

which is the chunkwise form with chunks of one position (m_t is the parallel form's row maximum, so eps takes the
same share). The gradient: one pass forward in time recomputes S_t and n_t (the same operations, so the same values)
for q's gradient S_t g_num + g_den n_t; one pass backward carries the gradient of the state, G_t = α_{t+1} G_{t+1} +
q_t g_numᵀ (and n's alike), for k's (β_t (G_t v_t + G^n_t) / √d) and v's (β_t G_tᵀ k̂_t); and the gates' follow
without the states: with b_t = Σ_{1≤j≤t} log σ(f̃_j), a_s = ĩ_s − b_s and g_t = m_t − b_t = max(g_{t−1}, a_t), the
output depends on a_s through exp(a_s − g_t) alone (gradient k̂_s · g_k̂_s), on g_t through those and exp(−m_t)
(−q_t · g_q_t plus the normaliser's), and on b_t through exp(−m_t) alone; g_t's gradient goes to a_t or g_{t−1} as
torch.maximum shares a tie, ĩ_t gets a_t's and log σ(f̃_t) the sum over s ≥ t of b_s's (f̃_0 none: it forgets
nothing). The (B, H, T, C) and (B, H, T, T) matrices of the chunkwise and parallel forms are never formed.

What it must equal: ``parallel_stabilized_simple`` and ``mlstm_chunkwise`` in float64 to 1e-10, gradients of q, k, v
and both gates included (``tests/test_mlstm_compiled.py``). Its float32 rounding is its own: S and n add one
position at a time (the PyTorch forms sum a chunk or the whole row in one product), and the gates use the C
library's exp and log1p. Measured against float64: on random inputs (T 64 to 256, saturated gates too) ≤ 6e-6 of the
largest output and ≤ 1e-5 of the largest gradient, where the chunkwise form is ≤ 3e-5 and xlstm's parallel form
≤ 3e-4; inside the atlas's xLSTM at initialisation (B 64, T 256, D 64) the cell's output 1.8e-6 of its largest
entry (the chunkwise form's 1.7e-7), the backbone's 5.4e-6 (2.2e-6 at T 64; the PyTorch cells 1.7e-6 and 1.5e-6).
Every (batch element, head) is computed alone, so the bits do not depend on how the work is split across torch's
threads.

``mlstm_layer_compiled`` (``mlstm_loop='compiled_qkv'``) is the same cell reading the mLSTM layer's rows: each pair
forms its q, k, v from the convolution's output and x_mlstm with its head's blocks of the headwise projections (4
wide in xlstm's layer: 4 products each, on 8 lanes for float32), runs the recurrence above on them, and writes h̃ in
the layer's (B, T, H·d); the backward maps the gradients of q, k, v back to the rows and to each batch element's share
of the blocks' gradients (summed over the batch in PyTorch). The per-head copies and the products with the heads'
(d, d) matrices (seven eighths zeros) of the other paths are gone; float32 rounds its q, k, v its own way.

``conv_silu_compiled`` (``mlstm_loop='compiled_conv'``: ``compiled_qkv`` with this too) is the layer's causal depthwise
convolution and its SiLU in one pass forward and one backward (the backward recomputes the convolution and writes the
input's gradient and each batch element's share of the taps' and bias's), where PyTorch's path makes about 17 passes
over (B, T, E) tensors (the convolution's K shifted products, its taps' products and sums, the SiLU and their
gradients). Its float32 σ is primacy's fast exp, so it rounds its own way.

``mlstm_tail_compiled`` (``mlstm_loop='compiled_layer'``: ``compiled_conv`` with this too) is ``mlstm_layer_compiled``
with the layer's output side in the same pass over a head's rows: the cell's per-head norm (a layer norm over the
head's units times its weight), the learnable skip and the SiLU gate, (norm(h̃) + skip ⊙ xc) ⊙ silu(z), forward and
backward, where PyTorch makes about 14 passes over (B, T, E) (the norm's transposed copy, the weight's product, the
skip's product and sum, the gate, and their gradients).

``mlstm_tail_compiled`` writes its outputs and gradients, and the convolution given a ``kept`` name (the mLSTM
layer's under ``compiled_layer``, the sLSTM layer's under ``slstm_loop='compiled_block'``) its own, in memory kept
between steps (``primacy_xlstm.compiled.kept_empty``): the same bits, without the page faults of fresh memory.
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path
from typing import Any

import torch
from primacy.errors import UsageError
from primacy.native import NativeLibrary
from torch.autograd.function import once_differentiable
from xlstm.blocks.mlstm.backends import parallel_stabilized_simple

from primacy_xlstm.compiled import _run, kept_empty

SOURCE = Path(__file__).with_name("native") / "mlstm.cpp"
ABI = 4  # primacy_mlstm_abi() of the source this module calls (2: the layer's entry points, 3: the convolution's,
# 4: the layer's with its output side)
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}
LIBRARY = NativeLibrary(SOURCE, "primacy_mlstm", ABI, "mlstm_loop='compiled'", "use mlstm_loop='pytorch'",
                        "this primacy-xlstm's mLSTM library")


def check_mlstm_compiled() -> None:
    """Builds (or finds) the library now, so that a config asking for it fails before any work, in one line."""
    _library()


@cache
def _library() -> ctypes.CDLL:
    """The compiled loops, built unless cached; UsageError (one line) when they cannot be built or loaded."""
    return LIBRARY.load()


def mlstm_takes(x: torch.Tensor) -> bool:
    """Whether the compiled cell takes a tensor like x: on the CPU, float32 or float64."""
    return x.device.type == "cpu" and x.dtype in _SUFFIX


def mlstm_compiled(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    igate_preact: torch.Tensor,
    fgate_preact: torch.Tensor,
    lower_triangular_matrix: torch.Tensor | None = None,
    stabilize_rowwise: bool = True,
    eps: float = 1e-6,
    **kwargs: Any,
) -> torch.Tensor:
    """xlstm's ``parallel_stabilized_simple`` (same arguments, same result h̃) on the compiled loops (module
    docstring); another stabiliser and a mask shorter than T go to xlstm's function (as in ``mlstm_chunkwise``), and
    tensors not on the CPU, or not all float32 or all float64, are refused in one line.

    Args:
        queries, keys: B H T d.
        values: B H T d_v.
        igate_preact, fgate_preact: B H T 1.

    Returns:
        B H T d_v.
    """
    length = queries.shape[2]
    short_mask = lower_triangular_matrix is not None and length > lower_triangular_matrix.size(-1)
    if not stabilize_rowwise or short_mask:
        return parallel_stabilized_simple(queries, keys, values, igate_preact, fgate_preact, lower_triangular_matrix,
                                          stabilize_rowwise, eps, **kwargs)
    tensors = (queries, keys, values, igate_preact, fgate_preact)
    if not all(mlstm_takes(x) and x.dtype == queries.dtype for x in tensors):
        found = ", ".join(sorted({f"{x.dtype} on {x.device.type}" for x in tensors}))
        raise UsageError(f"mlstm_loop='compiled' runs on float32 or float64 CPU tensors of one dtype, not {found}: "
                         "use mlstm_loop='pytorch'")
    return _compiled_cell(queries, keys, values, igate_preact, fgate_preact, float(eps))


@torch.compiler.disable  # torch.compile (primacy's CompileBackbone) calls it as it is: it cannot trace ctypes
def _compiled_cell(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, i_pre: torch.Tensor, f_pre: torch.Tensor,
                   eps: float) -> torch.Tensor:
    return _CompiledCell.apply(q, k, v, i_pre, f_pre, eps)


class _CompiledCell(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, i_pre: torch.Tensor,
                f_pre: torch.Tensor, eps: float) -> torch.Tensor:
        batch, heads, length, width = q.shape
        q, k, v, i_pre, f_pre = (x.contiguous() for x in (q, k, v, i_pre, f_pre))
        h = v.new_empty(v.shape)  # B H T d_v
        ms, dens = q.new_empty(batch, heads, length), q.new_empty(batch, heads, length)  # m_t, n_t · q_t
        kernel = getattr(_library(), f"primacy_mlstm_forward_{_SUFFIX[q.dtype]}")
        _run(kernel, batch * heads, length, width, v.shape[-1], eps, q, k, v, i_pre, f_pre, h, ms, dens)
        ctx.save_for_backward(q, k, v, i_pre, f_pre, h, ms, dens)
        ctx.eps = eps
        return h

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, i_pre, f_pre, h, ms, dens = ctx.saved_tensors
        batch, heads, length, width = q.shape
        grad = grad.contiguous()
        gq, gk, gv, gi, gf = (torch.empty_like(x) for x in (q, k, v, i_pre, f_pre))
        kernel = getattr(_library(), f"primacy_mlstm_backward_{_SUFFIX[q.dtype]}")
        _run(kernel, batch * heads, length, width, v.shape[-1], ctx.eps, q, k, v, i_pre, f_pre, h, ms, dens, grad,
             gq, gk, gv, gi, gf)
        return gq, gk, gv, gi, gf, None


def mlstm_layer_compiled(xc: torch.Tensor, xm: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor,
                         gates: torch.Tensor, heads: int, eps: float = 1e-6) -> torch.Tensor:
    """The mLSTM layer's q, k, v projections and cell on the compiled loops (``mlstm_loop='compiled_qkv'``), from the
    layer's rows: xc (B, T, E) the convolution's activated output (q's and k's input), xm (B, T, E) x_mlstm (v's),
    wq, wk, wv (NB, bs, bs) xlstm's headwise weights (blocks of width bs within each of ``heads`` heads), gates
    (B, T, 2·heads) the pre-activations (ĩ | f̃) -> h̃ (B, T, E), head h's at h·d (d = E / heads). It equals
    ``mlstm_compiled`` on q, k, v formed per head (B, H, T, d) to rounding: each pair's q, k, v are summed from their
    blocks (bs products in order) inside the kernel, never written out, and its recurrence is the same; the layout
    needs no copy per head either way. Differentiable in xc, xm, the weights and gates; tensors not on the CPU or not
    of one dtype, float32 or float64, are refused in one line."""
    tensors = (xc, xm, wq, wk, wv, gates)
    if not all(mlstm_takes(x) and x.dtype == xc.dtype for x in tensors):
        found = ", ".join(sorted({f"{x.dtype} on {x.device.type}" for x in tensors}))
        raise UsageError(f"mlstm_loop='compiled_qkv' runs on float32 or float64 CPU tensors of one dtype, not "
                         f"{found}: use mlstm_loop='pytorch'")
    return _compiled_layer(xc, xm, wq, wk, wv, gates, heads, float(eps))


@torch.compiler.disable  # as _compiled_cell
def _compiled_layer(xc: torch.Tensor, xm: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor,
                    gates: torch.Tensor, heads: int, eps: float) -> torch.Tensor:
    return _CompiledLayer.apply(xc, xm, wq, wk, wv, gates, heads, eps)


class _CompiledLayer(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, xc: torch.Tensor, xm: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor,
                gates: torch.Tensor, heads: int, eps: float) -> torch.Tensor:
        batch, length, width = xc.shape
        xc, xm, wq, wk, wv, gates = (x.contiguous() for x in (xc, xm, wq, wk, wv, gates))
        out = xc.new_empty(batch, length, width)  # B T E
        ms, dens = xc.new_empty(batch * heads, length), xc.new_empty(batch * heads, length)
        kernel = getattr(_library(), f"primacy_mlstm_layer_forward_{_SUFFIX[xc.dtype]}")
        _run(kernel, batch * heads, heads, length, width // heads, wq.shape[-1], eps, xc, xm, wq, wk, wv, gates, out,
             ms, dens)
        ctx.save_for_backward(xc, xm, wq, wk, wv, gates, out, ms, dens)
        ctx.heads, ctx.eps = heads, eps
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        xc, xm, wq, wk, wv, gates, out, ms, dens = ctx.saved_tensors
        batch, length, width = xc.shape
        heads = ctx.heads
        g_xc, g_xm, g_gates = torch.empty_like(xc), torch.empty_like(xm), torch.empty_like(gates)
        shares = xc.new_empty(batch, 3, *wq.shape)  # each batch element's share of the weights' gradients
        kernel = getattr(_library(), f"primacy_mlstm_layer_backward_{_SUFFIX[xc.dtype]}")
        _run(kernel, batch * heads, heads, length, width // heads, wq.shape[-1], ctx.eps, xc, xm, wq, wk, wv, gates,
             out, ms, dens, grad.contiguous(), g_xc, g_xm, g_gates, shares)
        g_wq, g_wk, g_wv = shares.sum(0).unbind(0)
        return g_xc, g_xm, g_wq, g_wk, g_wv, g_gates, None, None


def conv_silu_compiled(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                       setting: str = "mlstm_loop='compiled_conv'", kept: str = "") -> torch.Tensor:
    """silu(causal depthwise convolution of x) on the compiled loops (module docstring): x (B, T, C), the weight
    (C, 1, K) and bias (C,) or None of xlstm's ``CausalConv1d`` (its ``nn.Conv1d``, padded on the left) -> (B, T, C).
    Differentiable in all three; tensors not on the CPU or not of one dtype, float32 or float64, are refused in one
    line that names ``setting`` (the sLSTM layer's convolution runs it too: ``slstm_loop='compiled_conv'``). With a
    ``kept`` name its output and its input's gradient are written in memory kept between steps under that name
    (``primacy_xlstm.compiled.kept_empty``), with the same bits."""
    tensors = (x, weight) if bias is None else (x, weight, bias)
    if not all(mlstm_takes(t) and t.dtype == x.dtype for t in tensors):
        found = ", ".join(sorted({f"{t.dtype} on {t.device.type}" for t in tensors}))
        fallback = setting.split("=")[0]
        raise UsageError(f"{setting} runs on float32 or float64 CPU tensors of one dtype, not {found}: use "
                         f"{fallback}='pytorch'")
    return _compiled_conv(x, weight[:, 0].t(), bias if bias is not None else x.new_zeros(x.shape[-1]), kept)


@torch.compiler.disable  # as _compiled_cell
def _compiled_conv(x: torch.Tensor, taps: torch.Tensor, bias: torch.Tensor, kept: str) -> torch.Tensor:
    return _CompiledConv.apply(x, taps, bias, kept)


def _empty(kept: str, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """``kept_empty`` under ``kept`` + ``name`` with a ``kept`` name, else fresh memory."""
    return kept_empty(kept + name, shape, like) if kept else like.new_empty(shape)


class _CompiledConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, taps: torch.Tensor, bias: torch.Tensor, kept: str) -> torch.Tensor:
        batch, length, channels = x.shape
        x, taps, bias = x.contiguous(), taps.contiguous(), bias.contiguous()  # B T C, K C, C
        out = _empty(kept, "_out", tuple(x.shape), x)
        kernel = getattr(_library(), f"primacy_mlstm_conv_forward_{_SUFFIX[x.dtype]}")
        _run(kernel, batch, length, channels, taps.shape[0], x, taps, bias, out)
        ctx.save_for_backward(x, taps, bias)
        ctx.kept = kept
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, taps, bias = ctx.saved_tensors
        batch, length, channels = x.shape
        g_x = _empty(ctx.kept, "_grad", tuple(x.shape), x)
        g_taps, g_bias = x.new_empty(batch, *taps.shape), x.new_empty(batch, channels)  # each batch element's share
        kernel = getattr(_library(), f"primacy_mlstm_conv_backward_{_SUFFIX[x.dtype]}")
        _run(kernel, batch, length, channels, taps.shape[0], x, taps, bias, grad.contiguous(), g_x, g_taps, g_bias)
        return g_x, g_taps.sum(0), g_bias.sum(0), None


def mlstm_tail_compiled(xc: torch.Tensor, xm: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor,
                        gates: torch.Tensor, heads: int, z: torch.Tensor, skip: torch.Tensor, wln: torch.Tensor,
                        ln_eps: float, eps: float = 1e-6) -> torch.Tensor:
    """The mLSTM layer's (norm(h̃) + skip ⊙ xc) ⊙ silu(z) (B, T, E) on the compiled loops (module docstring): h̃ as
    ``mlstm_layer_compiled`` computes it from xc, xm, wq, wk, wv, gates; norm the cell's per-head layer norm (over
    each head's d units, ``ln_eps``) times ``wln`` (E, xlstm's weight_proxy); z (B, T, E) the output gate's
    pre-activation; skip (E) the learnable skip. Differentiable in every tensor; tensors not on the CPU or not of one
    dtype, float32 or float64, are refused in one line."""
    tensors = (xc, xm, wq, wk, wv, gates, z, skip, wln)
    if not all(mlstm_takes(x) and x.dtype == xc.dtype for x in tensors):
        found = ", ".join(sorted({f"{x.dtype} on {x.device.type}" for x in tensors}))
        raise UsageError(f"mlstm_loop='compiled_layer' runs on float32 or float64 CPU tensors of one dtype, not "
                         f"{found}: use mlstm_loop='pytorch'")
    return _compiled_tail(xc, xm, wq, wk, wv, gates, z, skip, wln, heads, float(eps), float(ln_eps))


@torch.compiler.disable  # as _compiled_cell
def _compiled_tail(*args: Any) -> torch.Tensor:
    return _CompiledTail.apply(*args)


class _CompiledTail(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, xc: torch.Tensor, xm: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor,
                gates: torch.Tensor, z: torch.Tensor, skip: torch.Tensor, wln: torch.Tensor, heads: int, eps: float,
                ln_eps: float) -> torch.Tensor:
        batch, length, width = xc.shape
        xc, xm, wq, wk, wv, gates, z, skip, wln = (x.contiguous() for x in (xc, xm, wq, wk, wv, gates, z, skip, wln))
        out = kept_empty("tail_h", (batch, length, width), xc)  # h̃, kept for backward
        hs = kept_empty("tail_out", (batch, length, width), xc)  # the output
        ms, dens = xc.new_empty(batch * heads, length), xc.new_empty(batch * heads, length)
        kernel = getattr(_library(), f"primacy_mlstm_tail_forward_{_SUFFIX[xc.dtype]}")
        _run(kernel, batch * heads, heads, length, width // heads, wq.shape[-1], eps, xc, xm, wq, wk, wv, gates, out,
             ms, dens, z, skip, wln, ln_eps, hs)
        ctx.save_for_backward(xc, xm, wq, wk, wv, gates, out, ms, dens, z, skip, wln)
        ctx.heads, ctx.eps, ctx.ln_eps = heads, eps, ln_eps
        return hs

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        xc, xm, wq, wk, wv, gates, out, ms, dens, z, skip, wln = ctx.saved_tensors
        batch, length, width = xc.shape
        heads = ctx.heads
        g_xc, g_xm, g_gates, g_z = (kept_empty(f"tail_grad{i}", tuple(x.shape), x) for i, x in enumerate((xc, xm, gates,
                                                                                                       z)))
        shares = xc.new_empty(batch, 3, *wq.shape)  # each batch element's share of the weights' gradients
        parts = xc.new_zeros(batch, 2, width)  # and of skip's and wln's
        kernel = getattr(_library(), f"primacy_mlstm_tail_backward_{_SUFFIX[xc.dtype]}")
        _run(kernel, batch * heads, heads, length, width // heads, wq.shape[-1], ctx.eps, xc, xm, wq, wk, wv, gates,
             out, ms, dens, g_xc, g_xm, g_gates, shares, z, skip, wln, ctx.ln_eps, grad.contiguous(), g_z, parts)
        g_wq, g_wk, g_wv = shares.sum(0).unbind(0)
        g_skip, g_wln = parts.sum(0).unbind(0)
        return g_xc, g_xm, g_wq, g_wk, g_wv, g_gates, g_z, g_skip, g_wln, None, None, None
