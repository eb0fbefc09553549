"""HiPPO transition matrices (Gu et al. 2020) and their normal-plus-low-rank (NPLR) decomposition."""

from __future__ import annotations

import torch

from primacy.errors import UsageError

MEASURES = ("legs",)


def hippo(measure: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Continuous-time HiPPO (A, B) in float64: A (N, N), B (N,), for dx/dt = A x + B u."""
    if measure not in MEASURES:
        raise UsageError(f"measure={measure!r} is unknown: choose one of {', '.join(MEASURES)}")
    if n < 1:
        raise UsageError(f"state size {n} is invalid: it must be at least 1")
    q = torch.sqrt(2 * torch.arange(n, dtype=torch.float64) + 1)  # N
    # LegS: A[n, k] = -sqrt(2n+1) sqrt(2k+1) below the diagonal, -(n+1) on it, 0 above; B[n] = sqrt(2n+1).
    a = -torch.tril(q[:, None] * q[None, :], diagonal=-1) - torch.diag(torch.arange(1, n + 1, dtype=torch.float64))
    return a, q.clone()


def nplr(measure: str, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A = V (diag(Λ) - P̃ P̃*) V* with V unitary, in the eigenbasis of A's normal part.

    Returns (Λ (N,), P̃ (N,), B̃ (N,), V (N, N)), complex128, where P̃ = V* P and B̃ = V* B; the eigenvalues
    come in conjugate pairs, ordered by imaginary part.
    """
    a, b = hippo(measure, n)
    p = torch.sqrt(torch.arange(n, dtype=torch.float64) + 0.5)  # N: LegS low-rank term, A + P P^T is normal
    normal = a + p[:, None] * p[None, :]  # N N: -1/2 I + skew-symmetric
    shift = torch.diagonal(normal).mean()
    skew = normal - shift * torch.eye(n, dtype=torch.float64)
    # The skew-symmetric part is i times a Hermitian matrix, so eigh gives exact-unitary eigenvectors.
    freq, v = torch.linalg.eigh(-1j * skew.to(torch.complex128))  # N, N N
    lam = shift + 1j * freq
    vh = v.conj().T
    return lam, vh @ p.to(torch.complex128), vh @ b.to(torch.complex128), v
