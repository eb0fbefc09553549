"""Diagonal-plus-low-rank (DPLR) state-space models: bilinear discretisation and the S4 convolution kernel.

The system is stored by halves. In the eigenbasis of HiPPO's normal part the full state x (N,) splits into
conjugate halves, x = (x̄_h, x_h), with A = diag(Λ) - P P*, Λ = (Λ̄_h, Λ_h), P = (P̄_h, P_h), B = (B̄_h, B_h),
C = (C̄_h, C_h), so y = C x = 2 Re(C_h x_h). Only the halves (H, N/2) are stored; the rank-one term P P* couples
the halves, so on x_h the recurrence is real-linear: x_h' = M x_h + M' x̄_h + B̄_h u.

Kernel (S4, Gu, Goel & Ré 2022): with z_k = exp(-2πik/L) and C̃ = C (I - Ā^L), the truncated generating
function Σ_{l<L} K_l z^l = C̃ (I - zĀ)^{-1} B̄ equals, for the bilinear Ā, B̄,

    K̂(z) = Δ C̃ [(1-z) I - (1+z) Δ/2 A]^{-1} B
         = Δ (k00 - k01 k10 β / (1 + β k11)),   β = (1+z) Δ/2          (Woodbury, rank one)

where k00, k01, k10, k11 are Cauchy sums Σ_n v_n / ((1-z) - (1+z) Δ/2 λ_n) of v = C̃B, C̃P, P*B, P*P over the
full spectrum. Written with (1-z) and (1+z) rather than S4's g(z) = 2/Δ (1-z)/(1+z), it has no pole at z = -1.
K is then the inverse FFT of K̂ at the roots of unity.
"""

from __future__ import annotations

import math

import torch


def frequency_nodes(length: int, device: torch.device | None = None) -> torch.Tensor:
    """(1 - z_k, 1 + z_k) for z_k = exp(-2πik/L), k = 0..L/2 (what rfft keeps): (2, L//2 + 1) complex128.

    Computed from half angles in float64, so 1 - z keeps its relative precision near z = 1.
    """
    theta = 2 * math.pi * torch.arange(length // 2 + 1, dtype=torch.float64, device=device) / length  # K
    half_sin, half_cos, sin = torch.sin(theta / 2), torch.cos(theta / 2), torch.sin(theta)
    one_minus = torch.complex(2 * half_sin**2, sin)  # 1 - e^{-iθ}
    one_plus = torch.complex(2 * half_cos**2, -sin)  # 1 + e^{-iθ}
    return torch.stack([one_minus, one_plus])


def _bilinear_increments(
    lam: torch.Tensor, p: torch.Tensor, b: torch.Tensor, dt: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """M - I, M' and B̄_h (see ``bilinear_halves``), with M - I formed directly: it is O(Δ), and 1 + O(Δ) - 1
    would lose its digits in float32 when Δ is small."""
    half_dt = (dt / 2)[:, None]  # H 1
    e = 1 - half_dt * lam  # H N/2
    u = half_dt * p / e  # H N/2: the half rows of E⁻¹ (Δ/2) P
    # 1 + (Δ/2) P* E⁻¹ P over the full spectrum: a half and its conjugate, so real.
    s = 1 + dt * (p.abs() ** 2 / e).sum(-1).real  # H
    scale = (2 / s)[:, None, None]  # H 1 1
    m_inc = torch.diag_embed(dt[:, None] * lam / e) - scale * u[:, :, None] * (p.conj() / e)[:, None, :]  # H N/2 N/2
    m_conj = -scale * u[:, :, None] * (p / e.conj())[:, None, :]  # H N/2 N/2: acts on x̄_h
    pb = 2 * (p.conj() * b / e).sum(-1).real  # H: P* E⁻¹ B over the full spectrum
    b_bar = dt[:, None] * (b / e - u * (pb / s)[:, None])  # H N/2
    return m_inc, m_conj, b_bar


def bilinear_halves(
    lam: torch.Tensor, p: torch.Tensor, b: torch.Tensor, dt: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Bilinear Ā, B̄ of A = diag(Λ) - P P* acting on the stored half: x_h' = M x_h + M' x̄_h + B̄_h u.

    lam, p, b: (H, N/2) complex halves; dt: (H,). Returns M, M' (H, N/2, N/2) and B̄_h (H, N/2).
    Uses Ā = 2 (I - Δ/2 A)^{-1} - I, where I - Δ/2 A = diag(e) + (Δ/2) P P* is inverted by Woodbury.
    """
    m_inc, m_conj, b_bar = _bilinear_increments(lam, p, b, dt)
    return m_inc + torch.eye(lam.shape[-1], dtype=lam.dtype, device=lam.device), m_conj, b_bar


def real_form(m: torch.Tensor, m_conj: torch.Tensor) -> torch.Tensor:
    """The real (H, N, N) matrix of x_h -> M x_h + M' x̄_h on the state (Re x_h, Im x_h)."""
    top = torch.cat([(m + m_conj).real, (m_conj - m).imag], dim=-1)  # H N/2 N
    bottom = torch.cat([(m + m_conj).imag, (m - m_conj).real], dim=-1)  # H N/2 N
    return torch.cat([top, bottom], dim=-2)


def truncation(
    lam: torch.Tensor, p: torch.Tensor, b: torch.Tensor, c: torch.Tensor, dt: torch.Tensor, steps: int
) -> torch.Tensor:
    """C̃_h (H, N/2), the stored half of C̃ = C (I - Ā^steps), for the truncated generating function.

    Repeated squaring of the real form of X = Ā - I (log2(steps) dense (N, N) products per channel), on
    increments: (I + X)^2 - I = 2X + X², and C((I+X_a)(I+X_b) - I) = r_a + (r_a + C) X_b with r_a = C X_a.
    No 1 - Ā^L cancellation, so small Δ and short L keep their precision; in float32 the error still grows
    like L·eps for modes that barely decay (FouT), as it does when stepping the recurrence.
    """
    m_inc, m_conj, _ = _bilinear_increments(lam, p, b, dt)
    x = real_form(m_inc, m_conj)  # H N N: Ā - I
    row = torch.cat([2 * c.real, -2 * c.imag], dim=-1)[:, None, :]  # H 1 N: y = 2(Re C · Re x - Im C · Im x)
    acc = torch.zeros_like(row)  # C (Ā^0 - I)
    while steps:
        if steps & 1:
            acc = torch.baddbmm(acc, acc + row, x)  # acc + (acc + C) X
        steps >>= 1
        if steps:
            x = torch.baddbmm(x, x, x, beta=2)  # 2X + X²
    w1, w2 = acc[:, 0].chunk(2, dim=-1)  # H N/2 each; 2 Re(W x_h) = w1 · Re x_h + w2 · Im x_h
    return -torch.complex(w1, -w2) / 2


def dplr_kernel(
    lam: torch.Tensor, p: torch.Tensor, b: torch.Tensor, c: torch.Tensor, dt: torch.Tensor, nodes: torch.Tensor,
    length: int,
) -> torch.Tensor:
    """K[h, l] = C Ā^l B̄ for l < length, by the truncated generating function (see the module docstring).

    lam, p, b, c: (H, N/2) complex halves (c is C itself, not C̃); dt: (H,); nodes: ``frequency_nodes(length)``
    in the working complex dtype. Returns (H, length) real.
    """
    c_tilde = truncation(lam, p, b, c, dt, length)  # H N/2: C (I - Ā^L)
    v = torch.stack([c_tilde * b, c_tilde * p, p.conj() * b, p.conj() * p], dim=1)  # H 4 N/2
    v = torch.cat([v.conj(), v], dim=-1)  # H 4 N: both halves
    lam_full = torch.cat([lam.conj(), lam], dim=-1)  # H N
    one_minus, one_plus = nodes  # K each
    beta = one_plus * (dt / 2)[:, None]  # H K
    cauchy = 1 / (one_minus - beta[:, None, :] * lam_full[:, :, None])  # H N K: the one shared denominator
    # The Woodbury step cancels heavily when the normal part barely decays (FouT: 1 + βk11 reaches 1e4 while
    # the errors of the four sums are correlated): in float32 it alone would cost 1e-4 relative. It runs in
    # float64, on (H, K) only (MPS has no float64).
    wide = v.dtype if v.device.type == "mps" else torch.complex128
    k00, k01, k10, k11 = (v @ cauchy).to(wide).unbind(1)  # H K each
    beta = beta.to(wide)
    k_hat = dt.to(wide.to_real())[:, None] * (k00 - k01 * k10 * beta / (1 + beta * k11))  # H K
    return torch.fft.irfft(k_hat.to(v.dtype), n=length)  # H L


def dplr_kernel_reference(
    lam: torch.Tensor, p: torch.Tensor, b: torch.Tensor, c: torch.Tensor, dt: torch.Tensor, length: int
) -> torch.Tensor:
    """The same kernel written for clarity: dense C̃, one materialised (H, N/2, L) Cauchy matrix per sum.

    A slow oracle for ``dplr_kernel`` and the baseline of benchmarks/s4_kernel.py.
    """
    # Dense full system in the eigenbasis, C̃ = C (I - Ā^L) by a matrix power.
    lam_f, p_f, b_f, c_f = (torch.cat([t.conj(), t], dim=-1) for t in (lam, p, b, c))  # H N each
    a = torch.diag_embed(lam_f) - p_f[:, :, None] * p_f.conj()[:, None, :]  # H N N
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    a_bar = torch.linalg.solve(eye - dt[:, None, None] / 2 * a, eye + dt[:, None, None] / 2 * a)  # H N N
    c_tilde = c_f - (c_f[:, None, :] @ torch.linalg.matrix_power(a_bar, length))[:, 0]  # H N
    c_tilde = c_tilde[:, lam.shape[-1]:]  # H N/2: the stored half

    z = torch.exp(-2j * math.pi * torch.arange(length, dtype=torch.float64, device=lam.device) / length)
    z = z.to(lam.dtype)  # L: all roots of unity

    def cauchy(v: torch.Tensor) -> torch.Tensor:
        """Σ_n v_n / ((1-z) - (1+z) Δ/2 λ_n) over both halves: (H, N/2) -> (H, L)."""
        half = dt[:, None, None] / 2
        den = (1 - z) - (1 + z) * half * lam[:, :, None]  # H N/2 L
        den_conj = (1 - z) - (1 + z) * half * lam.conj()[:, :, None]  # H N/2 L
        return (v[:, :, None] / den).sum(1) + (v.conj()[:, :, None] / den_conj).sum(1)

    k00, k01 = cauchy(c_tilde * b), cauchy(c_tilde * p)
    k10, k11 = cauchy(p.conj() * b), cauchy(p.conj() * p)
    beta = (1 + z) * dt[:, None] / 2  # H L
    k_hat = dt[:, None] * (k00 - k01 * k10 * beta / (1 + beta * k11))
    return torch.fft.ifft(k_hat, dim=-1).real
