"""Diagonal-plus-low-rank (DPLR) state-space models: the bilinear discretisation and the S4 convolution kernel.

The system is stored by halves. In the eigenbasis of HiPPO's normal part the full state x (N,) splits into
conjugate halves, x = (x̄_h, x_h), with A = diag(Λ) - P P*, Λ = (Λ̄_h, Λ_h), P = (P̄_h, P_h), B = (B̄_h, B_h),
C = (C̄_h, C_h), so y = C x = 2 Re(C_h x_h). Only the halves (H, N/2) are stored.

Bilinear step. With e = 1 - Δ/2 Λ_h, I - Δ/2 A = diag(e) + (Δ/2) P P* is inverted by Woodbury, and
Ā = 2 (I - Δ/2 A)^{-1} - I acts on the stored half as a diagonal plus a real rank-one term:

    Ā x = d̄ ⊙ x + σ(x) u,   d̄ = (1 + Δ/2 Λ_h) / e,   u = (Δ/2) P_h / e,   σ(x) = -(4/s) Re(g · x),

with g = P̄_h / e and s = 1 + Δ Re Σ |P_h|² / e (the sums over the full spectrum are twice the real part of the
half's). B̄ = Δ (B_h / e - u (P* E⁻¹ B) / s) likewise.

Kernel, in the time domain. Unrolling x_0 = B̄, x_{l+1} = Ā x_l with σ_l = σ(x_l) gives
x_l = d̄^l B̄ + Σ_{i<l} σ_i d̄^{l-1-i} u, so with four Vandermonde sums of the diagonal part

    α_l = -(4/s) Re Σ g B̄ d̄^l,   β_m = -(4/s) Re Σ g u d̄^m,   γ_l = 2 Re Σ C B̄ d̄^l,   η_m = 2 Re Σ C u d̄^m,

the rank-one feedback obeys σ_l = α_l + Σ_{i<l} β_{l-1-i} σ_i and the kernel is K_l = γ_l + Σ_{i<l} η_{l-1-i} σ_i.
As power series mod x^L: σ = α / (1 - x β) and K = γ + x η σ, computed with FFT products and Newton's
iteration for the inverse series. That is S4's kernel (Gu, Goel & Ré 2022) without its truncated generating
function: no C̃ = C (I - Ā^L), so no dense N x N matrix powers, and the kernel of length L is by construction
the first L values of one impulse response. The S4 paper's Cauchy/Woodbury form at the roots of unity is kept
as ``dplr_kernel_reference``, the oracle and the benchmark's baseline.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from primacy.ssm.diagonal import log_discrete, vandermonde, widened


def bilinear_parts(
    lam: torch.Tensor, p: torch.Tensor, b: torch.Tensor, dt: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The bilinear Ā, B̄ in diagonal-plus-rank-one form (module docstring): Ā x = d̄ ⊙ x + σ(x) u with
    σ(x) = scale · Re(g · x).

    lam, p, b: (H, N/2) complex halves; dt: (H,). Returns d̄ - 1 (formed directly: it is O(Δ)), u, g (H, N/2),
    scale = -4/s (H,) and B̄ (H, N/2).
    """
    half_dt = (dt / 2)[:, None]  # H 1
    e = 1 - half_dt * lam  # H N/2
    u = half_dt * p / e  # H N/2: the half rows of E⁻¹ (Δ/2) P
    g = p.conj() / e  # H N/2
    s = 1 + dt * (p.abs() ** 2 / e).sum(-1).real  # H: 1 + (Δ/2) P* E⁻¹ P over the full spectrum, real
    pb = 2 * (p.conj() * b / e).sum(-1).real  # H: P* E⁻¹ B over the full spectrum
    b_bar = dt[:, None] * (b / e - u * (pb / s)[:, None])  # H N/2
    return dt[:, None] * lam / e, u, g, -4 / s, b_bar


def bilinear_halves(
    lam: torch.Tensor, p: torch.Tensor, b: torch.Tensor, dt: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Bilinear Ā, B̄ of A = diag(Λ) - P P* as dense matrices on the stored half: x_h' = M x_h + M' x̄_h + B̄_h u.

    lam, p, b: (H, N/2) complex halves; dt: (H,). Returns M, M' (H, N/2, N/2) and B̄_h (H, N/2); from
    σ(x) u = (scale / 2) u (g · x + ḡ · x̄): M = diag(d̄) + (scale / 2) u gᵀ, M' = (scale / 2) u ḡᵀ.
    """
    d_inc, u, g, scale, b_bar = bilinear_parts(lam, p, b, dt)
    outer = (scale / 2)[:, None, None] * u[:, :, None]  # H N/2 1
    m = torch.diag_embed(1 + d_inc) + outer * g[:, None, :]  # H N/2 N/2
    return m, outer * g.conj()[:, None, :], b_bar


def fft_size(n: int) -> int:
    """The smallest power of two >= n: an FFT length that holds n coefficients without wrap-around, and a fast one
    (n itself may be prime)."""
    return 1 << max(n - 1, 0).bit_length()


def series_product(a: torch.Tensor, b: torch.Tensor, n: int) -> torch.Tensor:
    """The first n coefficients of the product of power series a (..., i) and b (..., j), by FFT: (..., n)."""
    size = fft_size(a.shape[-1] + b.shape[-1] - 1)  # the full product's coefficients
    return torch.fft.irfft(torch.fft.rfft(a, n=size) * torch.fft.rfft(b, n=size), n=size)[..., :n]


def series_inverse(q: torch.Tensor, n: int) -> torch.Tensor:
    """The first n coefficients of 1 / q for a power series q (..., >= n) with q[..., 0] = 1.

    Newton's iteration r ← r (2 - q r) mod x^m doubles m, the number of correct coefficients, each time (log2 n
    steps). Each step is one FFT product: 2 R - Q R², at a size that holds its full degree (no wrap-around).
    """
    r = torch.ones_like(q[..., :1])
    done = 1
    while done < n:
        previous, done = done, min(2 * done, n)
        size = fft_size(done + 2 * previous - 2)  # q mod x^done times r twice
        q_hat, r_hat = torch.fft.rfft(q[..., :done], n=size), torch.fft.rfft(r, n=size)
        r = torch.fft.irfft(r_hat * (2 - q_hat * r_hat), n=size)[..., :done]
    return r


def series_correlation(g: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """c[i] = Σ_{l >= i} g[l] v[l - i] for i < n, g (..., n), v (..., >= n): the adjoint of a -> a v mod x^n."""
    n = g.shape[-1]
    return series_product(g.flip(-1), v[..., :n], n).flip(-1)


class FeedbackSeries(torch.autograd.Function):
    """σ = α / (1 - x β) mod x^n for α, β (..., n), with the backward written out rather than traced through
    Newton's iteration: with r = 1 / (1 - x β), σ = α r, so dσ = r dα + x r σ dβ, and the gradients are the
    adjoints of those two products (``series_correlation``). Three FFT products in all."""

    @staticmethod
    def forward(ctx, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        n = alpha.shape[-1]
        one_minus_x_beta = torch.cat([torch.ones_like(beta[..., :1]), -beta[..., :-1]], dim=-1)  # (..., n)
        r = series_inverse(one_minus_x_beta, n)
        sigma = series_product(alpha, r, n)
        ctx.save_for_backward(r, sigma)
        return sigma

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r, sigma = ctx.saved_tensors
        x_r_sigma = F.pad(series_product(r, sigma, grad.shape[-1] - 1), (1, 0))  # x r σ mod x^n
        return series_correlation(grad, r), series_correlation(grad, x_r_sigma)


def dplr_kernel(
    lam: torch.Tensor, p: torch.Tensor, b: torch.Tensor, c: torch.Tensor, dt: torch.Tensor, length: int
) -> torch.Tensor:
    """K[h, l] = 2 Re(C Ā^l B̄) for l < length, in the time domain (see the module docstring).

    lam, p, b, c: (H, N/2) complex halves; dt: (H,). Returns (H, length) real in the parameters' precision. The
    Vandermonde sums use float64 exponents (``log_discrete``'s reasoning); the scalar series σ and K (H, length)
    run in float64, where their FFT products cost little (on MPS, in the working precision).
    """
    _, u, g, scale, b_bar = bilinear_parts(lam, p, b, dt)
    log_d = log_discrete(lam, dt, "bilinear")  # H N/2: log d̄, d̄ = (1 + Δλ/2) / (1 - Δλ/2)
    v = torch.stack([g * b_bar, g * u, c * b_bar, c * u], dim=1)  # H 4 N/2
    sums = widened(vandermonde(v, log_d, length))  # H 4 L: 2 Re Σ v d̄^l
    half_scale = widened(scale)[:, None] / 2  # H 1: σ = scale Re(·) = (scale / 2) 2 Re(·)
    alpha, beta, gamma, eta = half_scale * sums[:, 0], half_scale * sums[:, 1], sums[:, 2], sums[:, 3]  # H L each
    sigma = FeedbackSeries.apply(alpha, beta)  # H L: α / (1 - x β)
    kernel = gamma + F.pad(series_product(eta, sigma, length - 1), (1, 0))  # H L: γ + x η σ
    return kernel.to(lam.real.dtype)


def dplr_kernel_reference(
    lam: torch.Tensor, p: torch.Tensor, b: torch.Tensor, c: torch.Tensor, dt: torch.Tensor, length: int
) -> torch.Tensor:
    """The same kernel by S4's own route, written for clarity: a slow, independent oracle for ``dplr_kernel`` and
    the baseline of benchmarks/s4_kernel.py.

    With z_k = exp(-2πik/L) and C̃ = C (I - Ā^L), the truncated generating function Σ_{l<L} K_l z^l =
    C̃ (I - zĀ)^{-1} B̄ equals Δ C̃ [(1-z) I - (1+z) Δ/2 A]^{-1} B = Δ (k00 - k01 k10 β / (1 + β k11)) with
    β = (1+z) Δ/2 (Woodbury, rank one), where k00, k01, k10, k11 are the Cauchy sums
    Σ_n v_n / ((1-z) - (1+z) Δ/2 λ_n) of v = C̃B, C̃P, P*B, P*P over the full spectrum; K is its inverse FFT.
    Here C̃ comes from a dense matrix power and each Cauchy matrix (H, N/2, L) is materialised.
    """
    # Dense full system in the eigenbasis, C̃ = C (I - Ā^L) by a matrix power.
    lam_f, p_f, c_f = (torch.cat([t.conj(), t], dim=-1) for t in (lam, p, c))  # H N each
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
