"""S4D: the paper's S4 block with a diagonal state matrix (Gu, Gupta, Goel & Ré 2022)."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from primacy.backbones.ssm_block import SSMBlock
from primacy.checks import one_of
from primacy.ssm.diagonal import Discretization, discretize, log_discrete, vandermonde
from primacy.ssm.hippo import nplr
from primacy.ssm.timescale import DtTransform


class S4DBackbone(SSMBlock):
    """One S4 block with a diagonal SSM: y = GLU(Linear(GELU(K * u + D u))), no residual, no norm.

    Args:
        d_model: channels H.
        d_state: state size N, stored as N/2 complex conjugate pairs (so N must be even).
        init: ``legs``, the diagonal of HiPPO-LegS's normal-plus-low-rank form (S4D-LegS), or ``lin``
            (S4D-Lin: A_n = -1/2 + iπn, B_n = 1).
        discretization: ``bilinear`` (the paper) or ``zoh``.
        dt_min, dt_max: Δt of each channel starts log-uniform in this range.
        dt_transform: how the stored parameter maps to Δt: ``exp`` (stored log Δt) or ``softplus``.
        train_A, train_B, train_dt: whether these are trained; frozen ones are buffers-in-all-but-name
            (requires_grad False, never given to the optimiser). The paper's "HiPPO" setting freezes A and B.
        lr_dynamics: learning rate for A, B and Δt; None uses the model's. They never get weight decay.
    """

    def __init__(
        self,
        d_model: int = 64,
        d_state: int = 64,
        init: Literal["legs", "lin"] = "legs",
        discretization: Discretization = "bilinear",
        dt_min: float = 1e-3,
        dt_max: float = 1e-1,
        dt_transform: DtTransform = "exp",
        train_A: bool = True,
        train_B: bool = True,
        train_dt: bool = True,
        lr_dynamics: float | None = None,
    ) -> None:
        super().__init__()
        self._check_common(d_model, d_state, dt_min, dt_max, dt_transform, lr_dynamics)
        self.d_model, self.d_state = d_model, d_state
        self.init = one_of("init", init, ("legs", "lin"))
        self.discretization = one_of("discretization", discretization, ("bilinear", "zoh"))
        pairs = d_state // 2

        if init == "legs":
            lam, _, b, _ = nplr("legs", d_state)
            a, b = lam[pairs:], b[pairs:]  # the eigenvalues with positive imaginary part, one per pair
        else:
            a = -0.5 + 1j * math.pi * torch.arange(pairs, dtype=torch.float64)
            b = torch.ones(pairs, dtype=torch.complex128)
        a = a.to(torch.complex64).expand(d_model, pairs)  # H N
        b = b.to(torch.complex64).expand(d_model, pairs)  # H N
        # H N: variance 0.5 (0.25 in each of the real and imaginary parts), since torch's complex randn already has
        # unit variance; S4D's reference draws C at unit variance. Kept: every S4D result here was trained with it.
        c = torch.randn(d_model, pairs, dtype=torch.complex64) * math.sqrt(0.5)

        # Re A < 0 is kept by storing log(-Re A); complex values are stored as real (..., 2) views.
        self.log_neg_a_real = nn.Parameter(torch.log(-a.real).clone(), requires_grad=train_A)  # H N
        self.a_imag = nn.Parameter(a.imag.clone(), requires_grad=train_A)  # H N
        self.b = nn.Parameter(torch.view_as_real(b.clone()).clone(), requires_grad=train_B)  # H N 2
        self.c = nn.Parameter(torch.view_as_real(c).clone())  # H N 2
        self._init_block(d_model, dt_min, dt_max, dt_transform, train_dt, lr_dynamics)
        self._mark_dynamics(self.log_neg_a_real, self.a_imag, self.b)

    def ssm(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The continuous-time diagonal system and its step: A, B, C (H, N/2) complex, Δt (H,)."""
        a = -torch.exp(self.log_neg_a_real) + 1j * self.a_imag
        dt = self.step_size()
        return a, torch.view_as_complex(self.b), torch.view_as_complex(self.c), dt

    def discrete(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Ā, B̄, C (H, N/2) complex, with x_t = Ā x_{t-1} + B̄ u_t and y_t = 2 Re(C x_t)."""
        a, b, c, dt = self.ssm()
        a_bar, b_bar = discretize(a, b, dt, self.discretization)
        return a_bar, b_bar, c

    def kernel(self, length: int) -> torch.Tensor:
        """The SSM convolution kernel (H, length), without the D skip."""
        a, b, c, dt = self.ssm()
        _, b_bar = discretize(a, b, dt, self.discretization)
        return vandermonde((c * b_bar)[:, None], log_discrete(a, dt, self.discretization), length)[:, 0]

    def initial_state(self, batch_size: int) -> torch.Tensor:
        return torch.zeros(batch_size, self.d_model, self.d_state // 2, dtype=torch.view_as_complex(self.c).dtype,
                           device=self.c.device)  # B H N

    def step(self, x_t: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of the recurrence: x_t (B, H), state (B, H, N/2) -> y_t (B, H), new state."""
        a_bar, b_bar, c = self.discrete()
        state = a_bar * state + b_bar * x_t[:, :, None]  # B H N
        y = 2 * torch.einsum("hn,bhn->bh", c, state).real + self.skip * x_t  # B H
        return self._block(y), state
