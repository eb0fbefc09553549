"""Dense state-space maths for references and figures: bilinear discretisation and impulse responses."""

from __future__ import annotations

import torch


def bilinear(a: torch.Tensor, b: torch.Tensor, dt: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Ā = (I - Δ/2 A)⁻¹ (I + Δ/2 A), B̄ = Δ (I - Δ/2 A)⁻¹ B for a dense A (N, N) and B (N,)."""
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    back = torch.linalg.inv(eye - dt / 2 * a)
    return back @ (eye + dt / 2 * a), dt * back @ b


def impulse_responses(a: torch.Tensor, b: torch.Tensor, dt: float, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The state's response to a unit impulse, continuous and discretised, sampled every Δt.

    Returns (continuous, discrete), each (length, N): continuous[j] = exp(jΔ A) B, the exact solution at
    τ = jΔ; discrete[j] = Ā^j B̄ / Δ, the bilinear recurrence (divided by Δ, since B̄ ≈ Δ B).
    """
    step = torch.linalg.matrix_exp(dt * a)  # N N
    a_bar, b_bar = bilinear(a, b, dt)
    continuous, discrete = [b], [b_bar / dt]
    for _ in range(length - 1):
        continuous.append(step @ continuous[-1])
        discrete.append(a_bar @ discrete[-1])
    return torch.stack(continuous), torch.stack(discrete)
