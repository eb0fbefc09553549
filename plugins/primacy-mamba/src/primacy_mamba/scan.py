"""The selective scan on the CPU: a loop over time with a hand-derived backward that recomputes the states.

    h_t = exp(Δ_t A) ⊙ h_{t-1} + (Δ_t u_t) B_t,    y_t = h_t C_t + D ⊙ u_t,    h_0 = 0

mambapy's parallel scan materialises the (B, T, E·D, N) states and autograd keeps three such tensors per layer; on a
CPU the scan is bound by memory traffic over them. This one keeps only its inputs, runs the batch in slices whose
states fit in cache, and recomputes a slice's states in the backward pass (as mamba_ssm's CUDA kernel does), so it
is several times faster on a CPU and its memory is that of the (B, T, E·D) tensors around it.

Legend: B batch, T time, E the scan's channels (E·D of the mixer), N state size.
"""

from __future__ import annotations

import torch

CACHE_ELEMENTS = 2**20  # (slice, T, E, N) states per slice on the CPU: 4 MiB in float32, measured fastest ...
STEP_ELEMENTS = 2**14  # ... unless a time step's (slice, E, N) would be smaller than this: then Python's overhead wins


def selective_scan(u: torch.Tensor, dt: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                   d: torch.Tensor) -> torch.Tensor:
    """y (B, T, E) of the scan above from u, dt (B, T, E), a (E, N), b, c (B, T, N) and d (E,); dt is Δ after its
    softplus. Differentiable in every input."""
    return _SelectiveScan.apply(u, dt, a, b, c, d)


def _slices(u: torch.Tensor, a: torch.Tensor) -> list[slice]:
    """Batch slices: whole on a GPU (where a slice costs kernel launches), else about CACHE_ELEMENTS states each."""
    batch, length, channels = u.shape
    per_step = channels * a.shape[1]
    size = batch if u.is_cuda else max(1, CACHE_ELEMENTS // (length * per_step), STEP_ELEMENTS // per_step)
    return [slice(i, i + size) for i in range(0, batch, size)]


def _states(u: torch.Tensor, dt: torch.Tensor, a: torch.Tensor, b: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """exp(Δ_t A) and h_t for every t, (B, T, E, N) each."""
    decay = torch.exp(dt[..., None] * a)  # B T E N
    states = (dt * u)[..., None] * b[:, :, None, :]  # B T E N: the injections, turned into states in place
    for t in range(1, u.shape[1]):
        states[:, t].addcmul_(decay[:, t], states[:, t - 1])
    return decay, states


class _SelectiveScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, dt, a, b, c, d):
        ctx.dtypes = a.dtype, d.dtype  # mambapy passes A and D in float32 even in a float64 model
        a = a.to(u.dtype)
        y = torch.empty_like(u)  # B T E
        for part in _slices(u, a):
            _, states = _states(u[part], dt[part], a, b[part])
            y[part] = torch.einsum("bten,btn->bte", states, c[part])
        y += d * u
        ctx.save_for_backward(u, dt, a, b, c, d)
        return y

    @staticmethod
    def backward(ctx, gy):
        u, dt, a, b, c, d = ctx.saved_tensors
        gu, gdt, gb, gc = (torch.empty_like(x) for x in (u, dt, b, c))
        ga = torch.zeros_like(a)
        for part in _slices(u, a):
            u_, dt_, b_, gy_ = u[part], dt[part], b[part], gy[part]
            decay, states = _states(u_, dt_, a, b_)  # B T E N each
            gc[part] = torch.einsum("bten,bte->btn", states, gy_)
            g = gy_[..., None] * c[part][:, :, None, :]  # B T E N: dL/dh_t, completed backwards in time
            for t in range(u.shape[1] - 2, -1, -1):
                g[:, t].addcmul_(decay[:, t + 1], g[:, t + 1])
            g_log = g[:, 1:] * states[:, :-1]  # B T-1 E N: dL/d(Δ_t A) for t ≥ 1 (h_0's decay acts on zeros)
            g_log *= decay[:, 1:]
            g_inject = torch.einsum("bten,btn->bte", g, b_)  # dL/d(Δ_t u_t)
            gdt[part] = g_inject * u_
            gdt[part][:, 1:] += torch.einsum("bten,en->bte", g_log, a)
            ga += torch.einsum("bten,bte->en", g_log, dt_[:, 1:])
            gb[part] = torch.einsum("bten,bte->btn", g, dt_ * u_)
            gu[part] = g_inject * dt_
        gu += gy * d
        a_dtype, d_dtype = ctx.dtypes
        return gu, gdt, ga.to(a_dtype), gb, gc, (gy * u).sum((0, 1)).to(d_dtype)
