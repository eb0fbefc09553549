"""HiPPO transition matrices (Gu et al. 2020) and their normal-plus-low-rank (NPLR) decomposition.

Conventions follow the S4 code the paper's author used (state-spaces/s4, v3 and later, with the author's LagT):

- ``legs``: A[n, k] = -sqrt(2n+1) sqrt(2k+1) below the diagonal, -(n+1) on it; B[n] = sqrt(2n+1).
- ``lagt``: generalised Laguerre with alpha = 0 and tilt beta = ``LAGT_BETA`` (0.01):
  A = -(1+beta)/2 on the diagonal, -1 below it; B = sqrt(beta). The S4 paper writes LagT with beta = 0, where
  the measure cannot be normalised (B = 0); HiPPO's code and the paper's code use beta = 0.01 and scale B by
  the measure's normalisation, zeta^(-1/2) = sqrt(beta) at alpha = 0.
- ``fout``: translated Fourier as S4's code names ``fourier``: state 0 is the constant, states (2j, 2j+1) rotate at
  frequency pi j (j = 1 .. N/2 - 1), state 1 is the unused zero-frequency sine; B = (1, 0, sqrt2, 0, sqrt2, 0, ...);
  A = rotations - B B^T (the rank-one term encodes the window's far end). N must be even.
- ``fout2``: the translated Fourier basis sqrt2 sin(2 pi n t), sqrt2 cos(2 pi n t), orthonormal on a window of length
  1, as Morita (2025) writes FouT (S4's ``fourier2``): frequencies 2 pi j, A = 2 (rotations(pi j) - B B^T) and 2 B,
  i.e. exactly twice ``fout``'s A and B. So ``fout2`` with step Δt is ``fout`` with step 2Δt: the bilinear and zero-
  order-hold discretisations depend on Δt A and Δt B only.

Every measure's low-rank part has rank one here (A + P P^T is normal), including ``fout``: the S4 paper's
first release wrote FouT with a rank-two correction, but the definition above (S4 v3+, the paper's code) needs
only P = B.
"""

from __future__ import annotations

import torch

from primacy.checks import one_of
from primacy.errors import UsageError

MEASURES = ("legs", "lagt", "fout", "fout2")
LAGT_BETA = 0.01


def _check(measure: str, n: int) -> None:
    one_of("measure", measure, MEASURES)
    if n < 1:
        raise UsageError(f"state size {n} is invalid: it must be at least 1")
    if measure in ("fout", "fout2") and n % 2:
        raise UsageError(f"state size {n} is invalid for measure={measure!r}: it must be even (sine/cosine pairs)")


def _fout_b(n: int) -> torch.Tensor:
    b = torch.zeros(n, dtype=torch.float64)
    b[0::2] = 2**0.5
    b[0] = 1.0
    return b


def hippo(measure: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Continuous-time HiPPO (A, B) in float64: A (N, N), B (N,), for dx/dt = A x + B u."""
    _check(measure, n)
    eye = torch.eye(n, dtype=torch.float64)
    if measure == "legs":
        q = torch.sqrt(2 * torch.arange(n, dtype=torch.float64) + 1)  # N
        a = -torch.tril(q[:, None] * q[None, :], diagonal=-1) - torch.diag(torch.arange(1, n + 1, dtype=torch.float64))
        return a, q.clone()
    if measure == "lagt":
        ones = torch.ones(n, n, dtype=torch.float64)
        a = -torch.tril(ones, diagonal=-1) - (1 + LAGT_BETA) / 2 * eye
        return a, torch.full((n,), LAGT_BETA**0.5, dtype=torch.float64)
    b = _fout_b(n)
    freq = torch.zeros(n - 1, dtype=torch.float64)  # super-diagonal: pair (2j, 2j+1) turns at pi j
    freq[2::2] = torch.pi * torch.arange(1, n // 2, dtype=torch.float64)
    a = torch.diag(freq, -1) - torch.diag(freq, 1) - b[:, None] * b[None, :]
    scale = 2.0 if measure == "fout2" else 1.0  # fout2: the same system on a window half as long
    return scale * a, scale * b


def low_rank(measure: str, n: int) -> torch.Tensor:
    """P (N,), float64, such that A + P P^T is normal (a multiple of I plus a skew-symmetric matrix)."""
    _check(measure, n)
    if measure == "legs":
        return torch.sqrt(torch.arange(n, dtype=torch.float64) + 0.5)
    if measure == "lagt":
        return torch.full((n,), 0.5**0.5, dtype=torch.float64)
    return _fout_b(n) * (2**0.5 if measure == "fout2" else 1.0)  # 2 A + 2 B B^T is normal: P = sqrt2 B


def _paired_eigenvectors(skew: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigen-decomposition of a real skew-symmetric S = V diag(i ω) V*, with V unitary and conjugate pairs mirrored.

    ω ascends, and column N-1-k of V is the conjugate of column k (ω of opposite sign), so the last N/2
    columns describe the whole real system. A zero eigenspace (FouT's constant and unused sine) is given a
    basis of the same form, (r1 ± i r2)/√2 from a real orthonormal basis of it; odd N leaves one real vector
    in the middle.
    """
    n = skew.shape[0]
    freq, v = torch.linalg.eigh(-1j * skew.to(torch.complex128))  # N, N N: -iS is Hermitian
    tol = 1e-9 * max(1.0, freq.abs().max().item())
    pos = freq > tol
    zero = freq.abs() <= tol
    v_pos, f_pos = v[:, pos], freq[pos]  # ascending
    null = v[:, zero]  # N Z; the null space of a real matrix has a real basis
    if null.shape[1]:
        u, _, _ = torch.linalg.svd(torch.cat([null.real, null.imag], dim=1), full_matrices=False)
        real_basis = u[:, : null.shape[1]].to(torch.complex128)  # N Z, orthonormal
        pairs = null.shape[1] // 2
        r1, r2 = real_basis[:, 0 : 2 * pairs : 2], real_basis[:, 1 : 2 * pairs : 2]
        plus = (r1 + 1j * r2) / 2**0.5
        middle = real_basis[:, 2 * pairs :]  # N 0 or N 1
        zero_block = torch.cat([plus.conj().flip(1), middle, plus], dim=1)
    else:
        zero_block = v[:, :0]
    vecs = torch.cat([v_pos.conj().flip(1), zero_block, v_pos], dim=1)
    freqs = torch.cat([-f_pos.flip(0), torch.zeros(zero_block.shape[1], dtype=freq.dtype), f_pos])
    assert vecs.shape == (n, n)
    return freqs, vecs


def nplr(measure: str, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A = V (diag(Λ) - P̃ P̃*) V* with V unitary, in the eigenbasis of A's normal part.

    Returns (Λ (N,), P̃ (N,), B̃ (N,), V (N, N)), complex128, where P̃ = V* P (rank one, see ``low_rank``) and
    B̃ = V* B. Λ is ordered by imaginary part and entry N-1-k is the conjugate of entry k (so are the rows of
    P̃, B̃ and the columns of V): the last N/2 entries (imaginary part >= 0) are one per conjugate pair.
    No clipping of B̃ (the S4 code clips Im B̃ to [-2, 2]): the decomposition is exact.
    """
    a, b = hippo(measure, n)
    p = low_rank(measure, n)
    normal = a + p[:, None] * p[None, :]  # N N: shift I + skew-symmetric
    shift = torch.diagonal(normal).mean()
    freq, v = _paired_eigenvectors(normal - shift * torch.eye(n, dtype=torch.float64))
    lam = shift + 1j * freq
    vh = v.conj().T
    return lam, vh @ p.to(torch.complex128), vh @ b.to(torch.complex128), v
