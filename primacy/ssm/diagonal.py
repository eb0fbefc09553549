"""Diagonal state-space models: discretisation and the convolution kernel (S4D, Gu et al. 2022)."""

from __future__ import annotations

from typing import Literal

import torch

Discretization = Literal["bilinear", "zoh"]


def discretize(
    a: torch.Tensor, b: torch.Tensor, dt: torch.Tensor, method: Discretization
) -> tuple[torch.Tensor, torch.Tensor]:
    """Discrete (Ā, B̄) of the diagonal system dx/dt = A x + B u sampled every Δt.

    a, b: (H, N) complex; dt: (H,) positive. Returns Ā, B̄: (H, N) complex.
    bilinear: Ā = (1 + ΔA/2) / (1 - ΔA/2), B̄ = Δ B / (1 - ΔA/2).  zoh: Ā = exp(ΔA), B̄ = (Ā - 1) / A · B.
    """
    dta = dt[:, None] * a  # H N
    if method == "bilinear":
        denom = 1 - dta / 2
        return (1 + dta / 2) / denom, dt[:, None] * b / denom
    if method == "zoh":
        a_bar = torch.exp(dta)
        return a_bar, (a_bar - 1) / a * b
    raise ValueError(f"discretization={method!r} is unknown: choose 'bilinear' or 'zoh'")


def vandermonde_kernel(a_bar: torch.Tensor, cb: torch.Tensor, length: int) -> torch.Tensor:
    """K[h, l] = 2 Re Σ_n cb[h, n] Ā[h, n]^l for l < length: the kernel of N conjugate pairs.

    a_bar, cb: (H, N) complex. Returns (H, length) real.
    """
    powers = torch.exp(torch.log(a_bar)[:, :, None] * torch.arange(length, device=a_bar.device))  # H N T
    return 2 * torch.einsum("hn,hnt->ht", cb, powers).real


def causal_conv(u: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """y[t] = Σ_{s<=t} K[s] u[t-s] per channel, by FFT. u: (B, H, T), kernel: (H, T) -> (B, H, T)."""
    length = u.shape[-1]
    n = 2 * length  # zero-pad so the circular convolution is the linear one
    y = torch.fft.irfft(torch.fft.rfft(u, n=n) * torch.fft.rfft(kernel, n=n), n=n)
    return y[..., :length]
