"""What the S4 and S4D backbones share: Δt, the D skip, the output block, and the forward pass given a kernel."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable
from contextlib import AbstractContextManager

import torch
import torch.nn.functional as F
from torch import nn

from primacy.backbones.base import Backbone
from primacy.backbones.influence import Influence, ablating, toeplitz, zero_units
from primacy.checks import fits_in_memory, one_of
from primacy.errors import UsageError
from primacy.ssm.diagonal import causal_conv
from primacy.ssm.timescale import DT_TRANSFORMS, DtTransform, check_dt_range, dt_to_raw, init_dt, raw_to_dt


class SSMBlock(Backbone):
    """One S4 block around an SSM convolution kernel: y = GLU(Linear(GELU(K * u + D u))), no residual, no norm.

    A subclass checks its arguments with ``_check_common``, creates its SSM parameters, then calls
    ``_init_block`` (Δt, D, output layer: in this order, so a seed gives the same initialisation as before the
    refactoring), and implements ``kernel(length) -> (H, length)``.
    """

    dt_transform: DtTransform

    @staticmethod
    def _check_common(d_model: int, d_state: int, dt_min: float, dt_max: float, dt_transform: str,
                      lr_dynamics: float | None) -> None:
        if d_model < 1:
            raise UsageError(f"d_model={d_model} is invalid: it must be at least 1")
        if d_state < 2 or d_state % 2:
            raise UsageError(f"d_state={d_state} is invalid: it must be even and at least 2 (conjugate pairs)")
        check_dt_range(dt_min, dt_max)
        one_of("dt_transform", dt_transform, DT_TRANSFORMS)
        if lr_dynamics is not None and lr_dynamics <= 0:
            raise UsageError(f"lr_dynamics={lr_dynamics} is invalid: it must be positive or null")
        fits_in_memory("the layer's weights", 4 * (2 * d_model**2 + 4 * d_model * d_state), d_model=d_model,
                       d_state=d_state)  # the GLU output layer (H, 2H) and the SSM's (H, N) parameters

    def _init_block(self, d_model: int, dt_min: float, dt_max: float, dt_transform: DtTransform, train_dt: bool,
                    lr_dynamics: float | None) -> None:
        self.dt_transform = dt_transform
        self.dt_raw = nn.Parameter(dt_to_raw(init_dt(d_model, dt_min, dt_max), dt_transform), requires_grad=train_dt)
        self.skip = nn.Parameter(torch.randn(d_model))  # H: the D term
        self.out = nn.Linear(d_model, 2 * d_model)
        self._dynamics_hint = {"weight_decay": 0.0} if lr_dynamics is None else {"weight_decay": 0.0, "lr": lr_dynamics}
        self._mark_dynamics(self.dt_raw)
        self.ablated: frozenset[int] = frozenset()  # channels whose SSM output is zeroed (``ablate``)

    def _mark_dynamics(self, *params: nn.Parameter) -> None:
        """SSM dynamics (A, B, Δt) get no weight decay and, if given, their own learning rate."""
        for p in params:
            p._optim = self._dynamics_hint

    def step_size(self) -> torch.Tensor:
        """Δt (H,), differentiable."""
        return raw_to_dt(self.dt_raw, self.dt_transform)

    def dt(self) -> dict[str, torch.Tensor]:
        return {"ssm": self.step_size().detach()}

    @abstractmethod
    def kernel(self, length: int) -> torch.Tensor:
        """The SSM convolution kernel (H, length), without the D skip."""

    def _block(self, y: torch.Tensor) -> torch.Tensor:
        """The output block on the SSM's output y (..., H), the ablated channels' zeroed first (forward and step)."""
        return F.glu(self.out(F.gelu(zero_units(y, self.ablated, dim=-1))), dim=-1)  # ... H -> ... 2H -> ... H

    def _channels_first(self, x: torch.Tensor) -> torch.Tensor:
        """The SSM's input u (B, H, T) from x (B, T, H): at least float32 (the FFT's precision)."""
        return x.to(torch.promote_types(x.dtype, torch.float32)).transpose(1, 2).contiguous()  # B H T

    def _mix(self, u: torch.Tensor) -> torch.Tensor:
        """The SSM's output K * u + D u (B, H, T), before GELU."""
        # Autocast would run the SSM's matrix products in half precision; the kernel and FFT stay in float32.
        with torch.autocast(device_type=u.device.type, enabled=False):
            return causal_conv(u, self.kernel(u.shape[-1])) + self.skip[:, None] * u  # B H T

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The FFT runs along time, so the SSM works on (B, H, T); both transposes are explicit copies, so that no
        # elementwise op (the D skip, GELU) or its backward runs on a transposed view: on CPU the layer's forward +
        # backward took 1.2-1.4x as long with the views (B, T, H = 64, 64, 64; 64, 512, 64; 16, 256, 256).
        y = self._mix(self._channels_first(x))  # B H T
        return self._block(y.transpose(1, 2).contiguous().to(x.dtype))  # B T H

    def influence(self, x: torch.Tensor) -> list[Influence]:
        """The one mixing layer's exact form on x (B, T, H); a unit is a channel.

        weights[b, h, t, s] = K[h, t - s] for s ≤ t, plus D[h] on the diagonal (the convolution as a Toeplitz matrix,
        ``toeplitz``); values = u (B, H, T), the SSM's input. The weights are the same for every batch row (an
        expanded view, no copies): a time-invariant layer's influence does not depend on content. output is
        causal_conv(u, K) + D u, the FFT path of forward.
        """
        with torch.no_grad():
            u = self._channels_first(x)  # B H T
            with torch.autocast(device_type=u.device.type, enabled=False):
                weights = toeplitz(self.kernel(u.shape[-1]), self.skip).to(u.dtype)  # H T T
            return [Influence(weights.expand(u.shape[0], -1, -1, -1), u, self._mix(u), "channel")]  # B H T T

    def ablate(self, units: Iterable[tuple[int, int]]) -> AbstractContextManager[None]:
        """``Backbone.ablate``: a unit (0, h) is channel h of the one layer; its SSM output K * u + D u is zero."""
        return ablating([self], units, [self.d_model], "channel")
