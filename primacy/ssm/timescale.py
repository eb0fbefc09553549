"""The discretisation step Δt of the SSM backbones: range check, log-uniform initialisation, parameterisation."""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F

from primacy.errors import UsageError

DtTransform = Literal["exp", "softplus"]
DT_TRANSFORMS = ("exp", "softplus")


def check_dt_range(dt_min: float, dt_max: float) -> None:
    if not 0 < dt_min <= dt_max:
        raise UsageError(
            f"dt_min={dt_min}, dt_max={dt_max} is not a valid Δt range: it needs 0 < dt_min <= dt_max"
        )


def init_dt(d_model: int, dt_min: float, dt_max: float) -> torch.Tensor:
    """One Δt per channel (H,), log-uniform in [dt_min, dt_max]."""
    return torch.exp(torch.rand(d_model) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))


def dt_to_raw(dt: torch.Tensor, transform: DtTransform) -> torch.Tensor:
    """The unconstrained parameter that ``transform`` maps back to ``dt``."""
    return torch.log(dt) if transform == "exp" else dt + torch.log(-torch.expm1(-dt))  # softplus⁻¹


def raw_to_dt(raw: torch.Tensor, transform: DtTransform) -> torch.Tensor:
    return torch.exp(raw) if transform == "exp" else F.softplus(raw)
