"""The mixer's causal depthwise convolution and its SiLU compiled for the CPU: ``native/scan.cpp``'s conv kernels.

    pre_t = Σ_j w_j ⊙ x_{t-(K-1)+j} + bias   (x before the first position is 0),   u_t = silu(pre_t)

What ``MambaMixer`` otherwise computes with ``primacy.backbones.conv.causal_depthwise`` and ``F.silu``: a padded copy
of x, K shifted multiply-adds, the bias and the SiLU forward, and in the backward the SiLU's derivative, K shifted
multiply-adds into a zeroed gradient and K products summed for the taps' gradient, each a pass over (B, T, E)
tensors in memory. Here one pass over each batch element does the forward, and two the backward (∂L/∂pre_t of every
position first, then ∂L/∂x), reading x where in_proj wrote it (a view, no copy). ∂L/∂w and ∂L/∂bias are per-element
partial sums added in batch order (the library, build and threads of ``primacy_mamba.compiled``), so the result is
the same on any number of threads.

float32 uses the library's vectorisable exp for the SiLU; float64 the C library's, so the float64 result equals
``conv_reference`` to rounding, gradients included.

Legend: B batch, T time, E channels (E·D of the mixer), K taps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from primacy.backbones.conv import causal_depthwise

from primacy_mamba.compiled import _SUFFIX, _parts, _pointer, _run, _sizes, check_tensors, library
from primacy_mamba.compiled_mixer import _batch_sum, _rows


@torch.compiler.disable  # as compiled_selective_scan: torch.compile cannot trace ctypes
def compiled_conv_silu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """u (B, T, E) of the map above from x (B, T, E; a view whose rows are contiguous is read in place), the weight
    (E, 1, K) of ``nn.Conv1d(E, E, K, groups=E)`` and its bias (E,) or None, on CPU tensors of float32 or float64.
    Differentiable in every input."""
    check_tensors(x, weight)
    if bias is None:
        return _CompiledConv.apply(x, weight, x.new_zeros(x.shape[-1]))
    return _CompiledConv.apply(x, weight, bias)


def conv_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The same u in PyTorch: what MambaMixer computes on the other scans."""
    return F.silu(causal_depthwise(x, weight, bias)[0])


class _CompiledConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.dtypes = weight.dtype, bias.dtype
        x, (batch_stride, row_stride) = _rows(x)
        taps = weight[:, 0].t().to(x.dtype).contiguous()  # K E
        bias = bias.to(x.dtype).contiguous()
        batch, length, channels = x.shape
        out = x.new_empty(batch, length, channels)  # B T E
        parts = _parts(batch)
        kernel = getattr(library(), f"primacy_conv_forward_{_SUFFIX[x.dtype]}")

        def work(i: int, first: int, last: int) -> None:
            kernel(*_sizes(first, last, length, channels, taps.shape[0]), _pointer(x),
                   *_sizes(batch_stride, row_stride), *map(_pointer, (taps, bias, out)))

        _run(work, parts)
        ctx.save_for_backward(x, taps, bias)
        ctx.strides = batch_stride, row_stride
        return out

    @staticmethod
    def backward(ctx, gout):
        x, taps, bias = ctx.saved_tensors
        batch_stride, row_stride = ctx.strides
        gout = gout.contiguous()
        batch, length, channels = gout.shape
        k = taps.shape[0]
        gx = gout.new_empty(batch, length, channels)  # B T E
        gw_parts, gbias_parts = gout.new_empty(batch, k, channels), gout.new_empty(batch, channels)
        parts = _parts(batch)
        scratch = gout.new_empty(len(parts), length * channels)  # each thread's ∂L/∂pre_t of every t
        kernel = getattr(library(), f"primacy_conv_backward_{_SUFFIX[gout.dtype]}")

        def work(i: int, first: int, last: int) -> None:
            kernel(*_sizes(first, last, length, channels, k), _pointer(x), *_sizes(batch_stride, row_stride),
                   *map(_pointer, (taps, bias, gout, gx, gw_parts, gbias_parts, scratch[i])))

        _run(work, parts)
        weight_dtype, bias_dtype = ctx.dtypes
        gweight = _batch_sum(gw_parts).t().contiguous()[:, None, :].to(weight_dtype)  # E 1 K
        return gx, gweight, _batch_sum(gbias_parts).to(bias_dtype)
