"""S4: the paper's S4 block with a diagonal-plus-low-rank (DPLR) HiPPO state matrix (Gu, Goel & Ré 2022)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from primacy.backbones.ssm_block import SSMBlock
from primacy.checks import one_of
from primacy.ssm.dplr import bilinear_halves, dplr_kernel
from primacy.ssm.hippo import MEASURES, nplr
from primacy.ssm.timescale import DtTransform

# FouT's normal part does not decay (Re Λ = 0) but A's stored as -exp(log(-Re Λ)): floor -Re Λ here, as the S4
# code does. LegS (-1/2) and LagT (-β/2 = -0.005) are above it and unchanged.
REAL_FLOOR = 1e-4


class S4Backbone(SSMBlock):
    """One S4 block with a DPLR SSM: y = GLU(Linear(GELU(K * u + D u))), no residual, no norm.

    The SSM is A = diag(Λ) - P P* (rank one, P shared on both sides as in S4) in the eigenbasis of the HiPPO
    matrix's normal part, discretised by the bilinear rule with one Δt per channel. Its Ā is a diagonal plus a
    rank-one term, so the kernel is Vandermonde sums of the diagonal part plus the rank-one feedback solved as a
    power series (see ``primacy.ssm.dplr``): kernels of different lengths are prefixes of one impulse response and
    the recurrent ``step`` agrees with the convolution. Λ, P, B, C are stored as N/2 conjugate-pair halves.

    Args:
        d_model: channels H.
        d_state: state size N, stored as N/2 complex conjugate pairs (so N must be even).
        measure: HiPPO initialisation of A and B: ``legs``, ``lagt`` (beta = 0.01), ``fout`` (S4's ``fourier``,
            frequencies pi j) or ``fout2`` (the paper's text and S4's ``fourier2``, 2 pi j: ``fout`` at twice the
            Δt); see ``primacy.ssm.hippo``. FouT's normal part gets real part -1e-4 instead of 0.
        dt_min, dt_max: Δt of each channel starts log-uniform in this range.
        dt_transform: how the stored parameter maps to Δt: ``exp`` (stored log Δt) or ``softplus``.
        train_A, train_B, train_C, train_dt: whether these are trained (A means Λ and P); frozen ones have
            requires_grad False and are never given to the optimiser. The paper's "HiPPO" setting freezes A, B.
        lr_dynamics: learning rate for A, B and Δt; None uses the model's. They never get weight decay.
    """

    def __init__(
        self,
        d_model: int = 64,
        d_state: int = 64,
        measure: Literal["legs", "lagt", "fout", "fout2"] = "legs",
        dt_min: float = 1e-3,
        dt_max: float = 1e-1,
        dt_transform: DtTransform = "exp",
        train_A: bool = True,
        train_B: bool = True,
        train_C: bool = True,
        train_dt: bool = True,
        lr_dynamics: float | None = None,
    ) -> None:
        super().__init__()
        self._check_common(d_model, d_state, dt_min, dt_max, dt_transform, lr_dynamics)
        self.d_model, self.d_state = d_model, d_state
        self.measure = one_of("measure", measure, MEASURES)
        pairs = d_state // 2

        lam, p, b, _ = nplr(measure, d_state)
        lam, p, b = lam[pairs:], p[pairs:], b[pairs:]  # imaginary part >= 0: one per conjugate pair
        lam = torch.complex(lam.real.clamp(max=-REAL_FLOOR), lam.imag)
        lam, p, b = (t.to(torch.complex64).expand(d_model, pairs) for t in (lam, p, b))  # H N/2 each
        c = torch.randn(d_model, pairs, dtype=torch.complex64)  # H N/2, E|C|² = 1 as in the S4 code

        # Re Λ < 0 is kept by storing log(-Re Λ); complex values are stored as real (..., 2) views.
        self.log_neg_a_real = nn.Parameter(torch.log(-lam.real).clone(), requires_grad=train_A)  # H N/2
        self.a_imag = nn.Parameter(lam.imag.clone(), requires_grad=train_A)  # H N/2
        self.p = nn.Parameter(torch.view_as_real(p.clone()).clone(), requires_grad=train_A)  # H N/2 2
        self.b = nn.Parameter(torch.view_as_real(b.clone()).clone(), requires_grad=train_B)  # H N/2 2
        self.c = nn.Parameter(torch.view_as_real(c).clone(), requires_grad=train_C)  # H N/2 2
        self._init_block(d_model, dt_min, dt_max, dt_transform, train_dt, lr_dynamics)
        self._mark_dynamics(self.log_neg_a_real, self.a_imag, self.p, self.b)

    def halves(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The stored halves Λ, P, B, C (H, N/2) complex, and Δt (H,)."""
        lam = torch.complex(-torch.exp(self.log_neg_a_real), self.a_imag)
        p, b, c = (torch.view_as_complex(t) for t in (self.p, self.b, self.c))
        return lam, p, b, c, self.step_size()

    def ssm(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The dense continuous-time system per channel: A (H, N, N), B, C (H, N) complex, and Δt (H,).

        State order: the conjugate halves, then the stored halves. y = C x is real, and
        ``kernel(L)[h, l] = Re(C_h Ā_h^l B̄_h)`` with Ā = (I - Δ/2 A)⁻¹(I + Δ/2 A), B̄ = Δ (I - Δ/2 A)⁻¹ B.
        """
        lam, p, b, c, dt = self.halves()
        lam, p, b, c = (torch.cat([t.conj(), t], dim=-1) for t in (lam, p, b, c))  # H N each
        a = torch.diag_embed(lam) - p[:, :, None] * p.conj()[:, None, :]  # H N N
        return a, b, c, dt

    def kernel(self, length: int) -> torch.Tensor:
        """The SSM convolution kernel (H, length), without the D skip; never below float32, autocast or not."""
        with torch.autocast(device_type=self.c.device.type, enabled=False):
            lam, p, b, c, dt = self.halves()
            return dplr_kernel(lam, p, b, c, dt, length)

    def discrete(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """M, M' (H, N/2, N/2), B̄, C (H, N/2): x_t = M x_{t-1} + M' x̄_{t-1} + B̄ u_t, y_t = 2 Re(C x_t)."""
        lam, p, b, c, dt = self.halves()
        m, m_conj, b_bar = bilinear_halves(lam, p, b, dt)
        return m, m_conj, b_bar, c

    def initial_state(self, batch_size: int) -> torch.Tensor:
        return torch.zeros(batch_size, self.d_model, self.d_state // 2, dtype=torch.view_as_complex(self.c).dtype,
                           device=self.c.device)  # B H N/2

    def step(self, x_t: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of the recurrence: x_t (B, H), state (B, H, N/2) -> y_t (B, H), new state."""
        m, m_conj, b_bar, c = self.discrete()
        state = (torch.einsum("hnm,bhm->bhn", m, state) + torch.einsum("hnm,bhm->bhn", m_conj, state.conj())
                 + b_bar * x_t[:, :, None])  # B H N/2
        y = 2 * torch.einsum("hn,bhn->bh", c, state).real + self.skip * x_t  # B H
        return self._block(y), state
