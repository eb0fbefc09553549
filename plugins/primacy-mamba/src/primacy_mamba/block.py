"""One Mamba layer (pre-norm residual around mambapy's MambaBlock) that remembers the Δt of its last forward pass.

Legend: B batch, T time, D model width, E·D inner width (expand E), N state size, R rank of the Δt projection.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from mambapy.mamba import MambaBlock, MambaConfig, RMSNorm
from torch import nn

from primacy_mamba.kernels import fused_scan


class MambaMixer(MambaBlock):
    """mambapy's MambaBlock (in_proj, causal depthwise conv1d, x_proj, dt_proj, A_log, D, out_proj) whose forward
    can hand the selective scan to mamba_ssm's fused CUDA kernel, and which keeps the mean Δt of its last pass.

    Both paths read the same parameters, so a state dict moves freely between CPU (pure) and GPU (fused) runs.
    """

    def __init__(self, config: MambaConfig) -> None:
        super().__init__(config)
        self.last_dt: torch.Tensor | None = None  # (E·D,): not a buffer, so it stays out of the state dict
        self.A_log._optim = {"weight_decay": 0.0}  # mambapy marks these _no_weight_decay; primacy reads _optim
        self.D._optim = {"weight_decay": 0.0}
        self.dt_proj.bias._optim = {"weight_decay": 0.0}

    def bias_dt(self) -> torch.Tensor:
        """Δt at zero input, softplus(dt_proj.bias) (E·D,): what dt() reports before any forward pass."""
        return F.softplus(self.dt_proj.bias).detach()

    def forward(self, x: torch.Tensor, fused: bool = False) -> torch.Tensor:
        """(B, T, D) -> (B, T, D); ``fused`` runs mamba_ssm's selective scan (CUDA only)."""
        length = x.shape[1]
        u, z = self.in_proj(x).chunk(2, dim=-1)  # B T E·D, B T E·D
        u = F.silu(self.conv1d(u.transpose(1, 2))[:, :, :length]).transpose(1, 2)  # B T E·D; the conv is causal
        rank, n = self.config.dt_rank, self.config.d_state
        dt_low, b, c = torch.split(self.x_proj(u), [rank, n, n], dim=-1)  # B T R, B T N, B T N
        dt_low, b, c = self._apply_layernorms(dt_low, b, c)
        dt_raw = dt_low @ self.dt_proj.weight.T  # B T E·D: dt_proj without its bias (the fused kernel adds it)
        a = -torch.exp(self.A_log.float())  # E·D N
        if fused:
            y = self._fused_scan(u, dt_raw, a, b, c, z)  # B T E·D, already gated by silu(z)
            with torch.no_grad():
                self.last_dt = F.softplus(dt_raw + self.dt_proj.bias).mean(dim=(0, 1)).detach()  # E·D
        else:
            dt = F.softplus(dt_raw + self.dt_proj.bias)  # B T E·D
            self.last_dt = dt.detach().mean(dim=(0, 1))  # E·D
            scan = self.selective_scan if self.config.pscan else self.selective_scan_seq
            y = scan(u, dt, a, b, c, self.D.float()) * F.silu(z)  # B T E·D
        return self.out_proj(y)  # B T D

    def _fused_scan(self, u: torch.Tensor, dt_raw: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                    z: torch.Tensor) -> torch.Tensor:
        """mamba_ssm's kernel wants channels before time, adds the Δt bias, applies softplus and the silu(z) gate,
        and recomputes the (B, T, E·D, N) states in its backward instead of storing them."""
        y = fused_scan()(
            u.transpose(1, 2).contiguous(), dt_raw.transpose(1, 2).contiguous(), a,  # B E·D T, B E·D T, E·D N
            b.transpose(1, 2).contiguous(), c.transpose(1, 2).contiguous(), self.D.float(),  # B N T, B N T, E·D
            z=z.transpose(1, 2).contiguous(), delta_bias=self.dt_proj.bias.float(), delta_softplus=True,
        )  # B E·D T
        return y.transpose(1, 2)  # B T E·D


class MambaLayer(nn.Module):
    """x + mixer(RMSNorm(x)): the residual block of Mamba (and of mambapy's ResidualBlock, same parameter names)."""

    def __init__(self, config: MambaConfig) -> None:
        super().__init__()
        self.mixer = MambaMixer(config)
        self.norm = RMSNorm(config.d_model, config.rms_norm_eps)

    def forward(self, x: torch.Tensor, fused: bool = False) -> torch.Tensor:
        return x + self.mixer(self.norm(x), fused)  # B T D
