"""scan='compiled_fma': the mixer from in_proj's output to the gated scan output in compiled loops, multiply-adds fused.

    u = silu(causal_depthwise(x) + conv bias),   (δ, B, C) = x_proj(u),   Δ = softplus(dt_proj(δ) + bias),
    h_t = exp(Δ_t A) ⊙ h_{t-1} + (Δ_t u_t) B_t,   out_t = (h_t C_t + D ⊙ u_t) ⊙ silu(z_t)

What ``compiled_conv`` computes (``primacy_mamba.compiled_conv`` and ``primacy_mamba.compiled_mixer``), in one autograd
Function from in_proj's output xz = (x, z) (B, T, 2 E) to out (B, T, E): the convolution and the mixer kernels
(``native/scan.cpp``'s ``fma_*``) and x_proj's matrix product between them. Beyond ``compiled_conv``'s loops:

- dt_proj (rank R, a few multiply-adds a channel) is computed inside the mixer's loops from x_proj's output, read in
  place (no (B, T, E) Δ before its bias, no split of x_proj's output, no product of a (B T, R) matrix), and its
  gradients are summed there too;
- the backward writes ∂L/∂x and ∂L/∂z into halves of one (B, T, 2 E) gradient (no concatenation), and ∂L/∂C_t in its
  first pass over time, while h_t is in registers;
- every a * b + c is rounded once (fma), and on x86-64 the loops are built for AVX-512, for AVX2 with FMA and for any
  CPU, the first the CPU runs called; channels go in blocks of 16 floats and sums over channels are taken in a fixed
  order, so every build gives the same bits. Where the CPU has no fused multiply-add the C library computes it,
  exactly but slowly: ``fma_native()`` says which, and scan='auto' takes this scan only where it is in hardware.

``compiled_rms_norm`` is mambapy's RMSNorm in the same kind of loops; the scan runs its layers' and its final norm on
it.

float32 uses the library's exp (fast_exp's steps) and softplus's log1p series with each multiply-add fused; float64
the C library's, so the float64 result equals ``fma_reference`` (the same maps in PyTorch) to rounding, gradients
included.

Legend: B batch, T time, E channels (E·D of the mixer), N state size, R Δ's rank, K convolution taps.
"""

from __future__ import annotations

import ctypes
import threading

import torch
import torch.nn.functional as F
from primacy.backbones.conv import causal_depthwise

from primacy_mamba.compiled import _SUFFIX, _parts, _pointer, _run, _sizes, check_tensors, library
from primacy_mamba.compiled_mixer import _batch_sum, _rows

PARTIALS = 17  # native/scan.cpp: the partial sums of one sum over channels (16 lanes and the rest)
WORKSPACE_BYTES = 64 * 2**20  # the most a thread keeps between backward passes (_workspace)
ALIGN = 16  # elements: each workspace tensor starts at a multiple of 64 bytes (of 16 float32), as torch's allocations
_kept = threading.local()


def fma_native() -> bool:
    """Whether this CPU fuses multiply-adds in hardware (x86-64 with AVX2 and FMA, or aarch64): where it does not,
    scan='compiled_fma' runs on the C library's fma, with the same bits, many times slower."""
    return bool(library().primacy_fma_native())


@torch.compiler.disable  # as compiled_selective_scan: torch.compile cannot trace ctypes
def compiled_fma_mixer(xz: torch.Tensor, conv_weight: torch.Tensor, conv_bias: torch.Tensor | None,
                       x_proj_weight: torch.Tensor, dt_proj_weight: torch.Tensor, dt_bias: torch.Tensor,
                       a: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, Δ's mean) of the map above: out (B, T, E) from in_proj's output xz (B, T, 2 E; rows contiguous, read in
    place), the convolution's weight (E, 1, K) and bias (E,) or None, x_proj's weight (R + 2 N, E), dt_proj's weight
    (E, R) and bias (E,), A (E, N) and D (E,); Δ's mean over batch and time (E,), without gradient. CPU tensors,
    xz float32 or float64 (the others are taken in its dtype). Differentiable in every input."""
    check_tensors(xz)
    bias = conv_bias if conv_bias is not None else xz.new_zeros(xz.shape[-1] // 2)
    return _CompiledFma.apply(xz, conv_weight, bias, x_proj_weight, dt_proj_weight, dt_bias, a, d,
                              conv_bias is not None)


def fma_reference(xz: torch.Tensor, conv_weight: torch.Tensor, conv_bias: torch.Tensor | None,
                  x_proj_weight: torch.Tensor, dt_proj_weight: torch.Tensor, dt_bias: torch.Tensor, a: torch.Tensor,
                  d: torch.Tensor, scan) -> torch.Tensor:
    """The same out in PyTorch around ``scan`` (``selective_scan``'s signature): what MambaMixer computes on the
    other scans."""
    x, z = xz.chunk(2, dim=-1)
    u = F.silu(causal_depthwise(x, conv_weight, conv_bias)[0])
    rank, n = dt_proj_weight.shape[1], a.shape[1]
    low, b, c = torch.split(F.linear(u, x_proj_weight), [rank, n, n], dim=-1)
    dt = F.softplus(F.linear(low, dt_proj_weight) + dt_bias)
    return scan(u, dt, a, b, c, d) * F.silu(z)


@torch.compiler.disable
def compiled_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """mambapy's RMSNorm, x / sqrt(mean(x²) + eps) ⊙ weight over x's last axis (B, T, D), in compiled loops with fused
    multiply-adds (scan='compiled_fma' runs its layers' and its final norm on it); CPU tensors, x float32 or float64
    (the weight is taken in x's dtype). Differentiable in x and weight."""
    check_tensors(x)
    return _CompiledRMSNorm.apply(x, weight, eps)


def _workspace(like: torch.Tensor, *shapes: tuple[int, ...]) -> list[torch.Tensor]:
    """Uninitialised tensors of these shapes in like's dtype, for a backward's temporaries (none outlives the call),
    carved from one buffer this thread keeps between calls when it takes at most WORKSPACE_BYTES. Allocated anew on
    each call, buffers this large are mapped afresh by the C library, and first writing them faults page by page: in
    benchmarks/peers.py's Mamba step (B 64, T 64, D 64) the backward's kernel took 1,320 page faults a step on fresh
    temporaries, 716 on kept ones (the rest are ∂L/∂xz's, which autograd keeps). The kernels write every element
    before reading it (as they did on new_empty's memory), so the results have the same bits."""
    sizes = [-(-torch.Size(shape).numel() // ALIGN) * ALIGN for shape in shapes]
    buffer = getattr(_kept, "buffer", None)
    if buffer is None or buffer.dtype != like.dtype or buffer.numel() < sum(sizes):
        buffer = like.new_empty(sum(sizes))
        if buffer.numel() * buffer.element_size() <= WORKSPACE_BYTES:
            _kept.buffer = buffer
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    return [buffer[offset:offset + torch.Size(shape).numel()].view(shape) for offset, shape in zip(offsets, shapes)]


def _at(x: torch.Tensor, offset: int) -> ctypes.c_void_p:
    """The address of x's element ``offset`` (its storage order)."""
    return ctypes.c_void_p(x.data_ptr() + offset * x.element_size())


class _CompiledFma(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xz, conv_weight, conv_bias, x_proj_weight, dt_proj_weight, dt_bias, a, d, has_bias):
        ctx.dtypes = [x.dtype for x in (conv_weight, conv_bias, x_proj_weight, dt_proj_weight, dt_bias, a, d)]
        ctx.has_bias = has_bias
        dtype = xz.dtype
        xz, strides = _rows(xz)
        batch, length, channels = xz.shape[0], xz.shape[1], xz.shape[2] // 2
        taps = conv_weight[:, 0].t().to(dtype).contiguous()  # K E
        conv_bias, d = conv_bias.to(dtype).contiguous(), d.to(dtype).contiguous()
        x_proj_weight = x_proj_weight.to(dtype).contiguous()  # R + 2N, E
        wt = dt_proj_weight.to(dtype).t().contiguous()  # R E
        dt_bias = dt_bias.to(dtype).contiguous()
        a_t = a.to(dtype).t().contiguous()  # N E: the kernels keep states channels innermost
        n, rank = a_t.shape[0], wt.shape[0]
        parts = _parts(batch)
        suffix = _SUFFIX[dtype]
        lib = library()
        u = xz.new_empty(batch, length, channels)  # B T E

        def conv(i: int, first: int, last: int) -> None:
            lib[f"primacy_fma_conv_forward_{suffix}"](*_sizes(first, last, length, channels, taps.shape[0]),
                                                      _pointer(xz), *_sizes(*strides), _pointer(taps),
                                                      _pointer(conv_bias), _pointer(u))

        _run(conv, parts)
        xdbl = F.linear(u, x_proj_weight)  # B T R+2N: δ, B, C
        out = xz.new_empty(batch, length, channels)
        dt_sums = xz.new_empty(batch, channels)
        scratch = xz.new_empty(len(parts), n * channels)

        def mixer(i: int, first: int, last: int) -> None:
            lib[f"primacy_fma_forward_{suffix}"](*_sizes(first, last, length, channels, n, rank),
                                                 *map(_pointer, (u, xdbl, wt, dt_bias, a_t, d)), _at(xz, channels),
                                                 *_sizes(*strides), *map(_pointer, (out, dt_sums, scratch[i])))

        _run(mixer, parts)
        ctx.save_for_backward(xz, taps, conv_bias, x_proj_weight, wt, dt_bias, a_t, d, u, xdbl)
        ctx.strides = strides
        dt_mean = _batch_sum(dt_sums) / (batch * length)  # E
        ctx.mark_non_differentiable(dt_mean)
        return out, dt_mean

    @staticmethod
    def backward(ctx, gout, _):
        xz, taps, conv_bias, x_proj_weight, wt, dt_bias, a_t, d, u, xdbl = ctx.saved_tensors
        strides = ctx.strides
        gout = gout.contiguous()
        batch, length, channels = u.shape
        n, rank, k = a_t.shape[0], wt.shape[0], taps.shape[0]
        parts = _parts(batch)
        suffix = _SUFFIX[u.dtype]
        lib = library()
        gxz = xz.new_empty(batch, length, 2 * channels)  # ∂L/∂x, ∂L/∂z: in_proj's output gradient, written in halves
        # temporaries (gu, gxdbl, per-element partial sums, the kernels' scratch) in this thread's kept workspace
        gu, gxdbl, ga, gw, gbias, gd, scratch, g_taps, g_conv_bias, conv_scratch = _workspace(
            u, u.shape, xdbl.shape, (batch, n, channels), (batch, rank, channels), (batch, channels), (batch, channels),
            (len(parts), (length + 2) * n * channels + 3 * length * channels + (n + rank) * PARTIALS),
            (batch, k, channels), (batch, channels), (len(parts), length * channels))

        def mixer(i: int, first: int, last: int) -> None:
            lib[f"primacy_fma_backward_{suffix}"](*_sizes(first, last, length, channels, n, rank),
                                                  *map(_pointer, (u, xdbl, wt, dt_bias, a_t, d)), _at(xz, channels),
                                                  *_sizes(*strides), *map(_pointer, (gout, gu, gxdbl)),
                                                  _at(gxz, channels), *_sizes(length * 2 * channels, 2 * channels),
                                                  *map(_pointer, (ga, gbias, gd, gw, scratch[i])))

        _run(mixer, parts)
        gu.view(-1, channels).addmm_(gxdbl.view(-1, xdbl.shape[-1]), x_proj_weight)  # + x_proj's share of ∂L/∂u
        g_x_proj = gxdbl.view(-1, xdbl.shape[-1]).t().mm(u.view(-1, channels))  # R+2N E

        def conv(i: int, first: int, last: int) -> None:
            lib[f"primacy_fma_conv_backward_{suffix}"](*_sizes(first, last, length, channels, k), _pointer(xz),
                                                       *_sizes(*strides), _pointer(taps), _pointer(conv_bias),
                                                       _pointer(gu), _pointer(gxz),
                                                       *_sizes(length * 2 * channels, 2 * channels),
                                                       *map(_pointer, (g_taps, g_conv_bias, conv_scratch[i])))

        _run(conv, parts)
        grads = (_batch_sum(g_taps).t()[:, None, :], _batch_sum(g_conv_bias) if ctx.has_bias else None, g_x_proj,
                 _batch_sum(gw).t(), _batch_sum(gbias), _batch_sum(ga).t(), _batch_sum(gd))
        grads = [g.contiguous().to(dtype) if g is not None else None for g, dtype in zip(grads, ctx.dtypes)]
        return gxz, *grads, None


class _CompiledRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.weight_dtype = weight.dtype
        x = x.contiguous()
        weight = weight.to(x.dtype).contiguous()
        batch, length, width = x.shape
        y, rs = torch.empty_like(x), x.new_empty(batch, length)  # rs: each row's 1 / sqrt(mean(x²) + eps)
        kernel = library()[f"primacy_fma_rms_forward_{_SUFFIX[x.dtype]}"]
        scalar = ctypes.c_float if x.dtype == torch.float32 else ctypes.c_double

        def work(i: int, first: int, last: int) -> None:
            kernel(*_sizes(first * length, last * length, width), _pointer(x), _pointer(weight), scalar(eps),
                   _pointer(y), _pointer(rs))

        _run(work, _parts(batch))
        ctx.save_for_backward(x, weight, rs)
        return y

    @staticmethod
    def backward(ctx, gy):
        x, weight, rs = ctx.saved_tensors
        gy = gy.contiguous()
        batch, length, width = x.shape
        gx, gw = torch.empty_like(x), x.new_empty(batch, width)  # gw: each element's partial sum
        kernel = library()[f"primacy_fma_rms_backward_{_SUFFIX[x.dtype]}"]

        def work(i: int, first: int, last: int) -> None:
            kernel(*_sizes(first, last, length, width), *map(_pointer, (x, weight, rs, gy, gx, gw)))

        _run(work, _parts(batch))
        return gx, _batch_sum(gw).to(ctx.weight_dtype), None
