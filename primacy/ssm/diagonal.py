"""Diagonal state-space models: discretisation and the convolution kernel (S4D, Gu et al. 2022)."""

from __future__ import annotations

import math
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


def widened(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float64 / complex128; unchanged on MPS, which has neither."""
    if t.device.type == "mps":
        return t
    return t.to(torch.complex128 if t.is_complex() else torch.float64)


def log_discrete(a: torch.Tensor, dt: torch.Tensor, method: Discretization) -> torch.Tensor:
    """log Ā of ``discretize`` in complex128 (``widened``), from the working-precision a (H, N) and dt (H,): (H, N).

    bilinear: log Ā = log(1 + z) - log(1 - z) = 2 atanh(z), z = ΔA/2; zoh: log Ā = ΔA. Forming z in float64
    matters: Ā^l = exp(l log Ā), so a relative error ε in log Ā is an error of l·ε·|log Ā| in Ā^l's phase, and
    float32's ε would cost 1e-5 at l = 256. Any multiple of 2πi in the branch is harmless for integer powers.
    """
    dta = widened(dt)[:, None] * widened(a)  # H N
    if method == "bilinear":
        return 2 * torch.atanh(dta / 2)
    if method == "zoh":
        return dta
    raise ValueError(f"discretization={method!r} is unknown: choose 'bilinear' or 'zoh'")


def vandermonde(v: torch.Tensor, log_a: torch.Tensor, length: int) -> torch.Tensor:
    """2 Re Σ_n v[h, k, n] Ā[h, n]^l for l < length, Ā = exp(log_a): K sums of N conjugate pairs' powers.

    v: (H, K, N) complex (the working precision); log_a: (H, N) complex, ideally complex128 (``log_discrete``).
    Returns (H, K, length) real in v's precision.

    The (H, N, length) powers are never materialised: with l = a·S + b (S = ceil(√length)), Ā^l = Ā^{aS} Ā^b, so
    the sum is a product of (v ⊙ Ā^{aS}) (H, K·A, N) with Ā^b (H, N, S). Only those two small power tables are
    exponentiated, from exponents formed in float64 (on MPS, which has no float64, in v's precision), so each
    power carries about 2 float32 roundings whatever l is.
    """
    inner = math.isqrt(max(length - 1, 0)) + 1  # S
    outer = -(-length // inner)  # A, with A·S >= length
    wide = log_a if v.device.type != "mps" else log_a.to(v.dtype)
    real = wide.real.dtype
    small = torch.exp(wide[:, :, None] * torch.arange(inner, dtype=real, device=v.device)).to(v.dtype)  # H N S
    steps = inner * torch.arange(outer, dtype=real, device=v.device)  # A
    large = torch.exp(wide[:, None, :] * steps[:, None]).to(v.dtype)  # H A N
    weighted = (v[:, :, None, :] * large[:, None]).flatten(1, 2)  # H K·A N
    sums = (weighted @ small).real.unflatten(1, (v.shape[1], outer)).flatten(2)  # H K A·S
    return 2 * sums[..., :length]


def causal_conv(u: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """y[t] = Σ_{s<=t} K[s] u[t-s] per channel, by FFT. u: (B, H, T), kernel: (H, T) -> (B, H, T)."""
    length = u.shape[-1]
    n = 2 * length  # zero-pad so the circular convolution is the linear one
    y = torch.fft.irfft(torch.fft.rfft(u, n=n) * torch.fft.rfft(kernel, n=n), n=n)
    return y[..., :length]
