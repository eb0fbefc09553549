"""The compiled scan with the mixer's elementwise work folded in, on the CPU: ``native/scan.cpp``'s mixer kernels.

    Δ_t = softplus(x_t + bias),   h_t = exp(Δ_t A) ⊙ h_{t-1} + (Δ_t u_t) B_t,   out_t = (h_t C_t + D ⊙ u_t) ⊙ silu(z_t)

What mamba_ssm's CUDA kernel computes (``selective_scan_fn`` with ``delta_bias``, ``delta_softplus`` and ``z``), and
what ``MambaMixer`` otherwise computes as softplus, the scan, D·u and the gate, each a pass over (B, T, E) tensors
in memory forward and backward. Here they are done per position inside compiled loops (the library, build, threads
and batch-ordered sums of ``primacy_mamba.compiled``), and the backward returns every input's gradient at once,
∂L/∂bias and ∂L/∂D as batch-ordered sums of per-element partials. Unlike ``compiled``'s loops, these keep a state
(N, E), channels innermost: each loop runs over the E channels of one state index, long and vectorised, without
sums across vector lanes. The backward keeps one element's states and exp(Δ A) of every position (2 T N E values a
thread) from a first pass over time, then walks back over blocks of 8 channels with their rows in registers.

float32 uses the library's vectorisable exp (relative error ≤ 3e-7) and a log1p of its own for the softplus (module
``native/scan.cpp``); float64 the C library's, so the float64 result equals ``mixer_reference`` (softplus, any of the
other scans, the gate, in PyTorch) to rounding, gradients included.

Legend: B batch, T time, E the scan's channels (E·D of the mixer), N state size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from primacy_mamba.compiled import _SUFFIX, _parts, _pointer, _run, _sizes, check_tensors, library

SLOTS = 8  # native/scan.cpp's SLOTS: the slots of one state index's partial sums of ∂L/∂B_t (and of ∂L/∂C_t)


@torch.compiler.disable  # as compiled_selective_scan: torch.compile cannot trace ctypes
def compiled_mixer_scan(u: torch.Tensor, dt_raw: torch.Tensor, bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                        c: torch.Tensor, d: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, Δ's mean) of the map above: out (B, T, E) from u, dt_raw (Δ before bias and softplus), z (B, T, E), b, c
    (B, T, N), a (E, N), bias and d (E,), on CPU tensors of float32 or float64; Δ's mean over batch and time (E,),
    without gradient. Differentiable in every input."""
    check_tensors(u, dt_raw, b, c, z)
    return _CompiledMixer.apply(u, dt_raw, bias, a, b, c, d, z)


def mixer_reference(scan, u: torch.Tensor, dt_raw: torch.Tensor, bias: torch.Tensor, a: torch.Tensor,
                    b: torch.Tensor, c: torch.Tensor, d: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """The same out in PyTorch around ``scan`` (any of ``selective_scan``'s signature): what MambaMixer computes on
    the other scans."""
    return scan(u, F.softplus(dt_raw + bias), a, b, c, d) * F.silu(z)


class _CompiledMixer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, dt_raw, bias, a, b, c, d, z):
        ctx.dtypes = bias.dtype, a.dtype, d.dtype  # mambapy passes A and D in float32 even in a float64 model
        u, dt_raw, b, c = (x.contiguous() for x in (u, dt_raw, b, c))
        z, z_strides = _rows(z)  # in_proj's half, read in place
        bias, d = (x.to(u.dtype).contiguous() for x in (bias, d))
        a_t = a.to(u.dtype).t().contiguous()  # N E: the kernels keep states channels innermost
        batch, length, channels = u.shape
        n = a.shape[1]
        out = torch.empty_like(u)  # B T E
        dt_sums = u.new_empty(batch, channels)  # B E: Σ_t Δ_t per batch element
        parts = _parts(batch)
        scratch = u.new_empty(len(parts), (n + 4) * channels)
        kernel = getattr(library(), f"primacy_mixer_forward_{_SUFFIX[u.dtype]}")

        def work(i: int, first: int, last: int) -> None:
            kernel(*_sizes(first, last, length, channels, n),
                   *map(_pointer, (u, dt_raw, bias, a_t, b, c, d, z)), *_sizes(*z_strides),
                   *map(_pointer, (out, dt_sums, scratch[i])))

        _run(work, parts)
        ctx.save_for_backward(u, dt_raw, bias, a_t, b, c, d, z)
        ctx.z_strides = z_strides
        dt_mean = _batch_sum(dt_sums) / (batch * length)  # E
        ctx.mark_non_differentiable(dt_mean)
        return out, dt_mean

    @staticmethod
    def backward(ctx, gout, _):
        u, dt_raw, bias, a_t, b, c, d, z = ctx.saved_tensors
        gout = gout.contiguous()
        batch, length, channels = u.shape
        n = a_t.shape[0]
        gu, gdt, gz, gb, gc = (torch.empty_like(x) for x in (u, dt_raw, u, b, c))
        ga_parts = u.new_empty(batch, n, channels)  # B N E
        gbias_parts, gd_parts = u.new_empty(batch, channels), u.new_empty(batch, channels)  # B E each
        parts = _parts(batch)
        # each thread's h_{-1}, ..., h_{T-1} and exp(Δ_t A) (N E each), carry (N E), Δ_t and y_t (E each), 7 rows (E)
        # and the slots of ∂L/∂B_t and ∂L/∂C_t's partial sums (N SLOTS each)
        scratch = u.new_empty(len(parts), (2 * length + 2) * n * channels + (2 * length + 7) * channels + 2 * n * SLOTS)
        kernel = getattr(library(), f"primacy_mixer_backward_{_SUFFIX[u.dtype]}")

        def work(i: int, first: int, last: int) -> None:
            kernel(*_sizes(first, last, length, channels, n),
                   *map(_pointer, (u, dt_raw, bias, a_t, b, c, d, z)), *_sizes(*ctx.z_strides),
                   *map(_pointer, (gout, gu, gdt, gb, gc, gz, ga_parts, gbias_parts, gd_parts, scratch[i])))

        _run(work, parts)
        bias_dtype, a_dtype, d_dtype = ctx.dtypes
        return (gu, gdt, _batch_sum(gbias_parts).to(bias_dtype), _batch_sum(ga_parts).t().to(a_dtype), gb, gc,
                _batch_sum(gd_parts).to(d_dtype), gz)


def _batch_sum(parts: torch.Tensor) -> torch.Tensor:
    """Σ over the first axis in its order, however the batch was split across threads (the same bits on any number):
    parts[0] + parts[1] + ... elementwise, in one compiled call rather than one torch operation a batch element."""
    parts = parts.contiguous()
    total = parts.new_empty(parts.shape[1:])
    getattr(library(), f"primacy_batch_sum_{_SUFFIX[parts.dtype]}")(*_sizes(parts.shape[0], total.numel()),
                                                                    _pointer(parts), _pointer(total))
    return total


def _rows(x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
    """x itself when its rows (last axis) are contiguous, else a contiguous copy; with its batch and row strides."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    return x, (x.stride(0), x.stride(1))
