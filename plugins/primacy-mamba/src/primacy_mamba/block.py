"""One Mamba layer (pre-norm residual around mambapy's MambaBlock) that remembers the Δt of its last forward pass.

Legend: B batch, T time, D model width, E·D inner width (expand E), N state size, R rank of the Δt projection.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from mambapy.mamba import MambaBlock, MambaConfig, RMSNorm
from primacy.backbones.conv import causal_depthwise
from primacy.backbones.influence import Influence, selective_scan_weights, zero_units
from primacy.checks import fits_in_memory
from torch import nn

from primacy_mamba.chunked import chunked_selective_scan
from primacy_mamba.compiled import compiled_selective_scan
from primacy_mamba.compiled_conv import compiled_conv_silu
from primacy_mamba.compiled_fma import compiled_fma_mixer, compiled_rms_norm
from primacy_mamba.compiled_mixer import compiled_mixer_scan
from primacy_mamba.kernels import fused_scan
from primacy_mamba.scan import selective_scan


class MambaMixer(MambaBlock):
    """mambapy's MambaBlock (in_proj, causal depthwise conv1d, x_proj, dt_proj, A_log, D, out_proj) whose forward
    can hand the selective scan to mamba_ssm's fused CUDA kernel, and which keeps the mean Δt of its last pass.

    Both paths read the same parameters, so a state dict moves freely between CPU (pure) and GPU (fused) runs.
    ``scan`` is the pure path's algorithm (``MambaBackbone``'s argument).
    """

    def __init__(self, config: MambaConfig, scan: str = "recurrent") -> None:
        super().__init__(config)
        self.scan = scan
        self.last_dt: torch.Tensor | None = None  # (E·D,): not a buffer, so it stays out of the state dict
        self.ablated: frozenset[int] = frozenset()  # inner channels whose output is zeroed (MambaBackbone.ablate)
        self.A_log._optim = {"weight_decay": 0.0}  # mambapy marks these _no_weight_decay; primacy reads _optim
        self.D._optim = {"weight_decay": 0.0}
        self.dt_proj.bias._optim = {"weight_decay": 0.0}

    def bias_dt(self) -> torch.Tensor:
        """Δt at zero input, softplus(dt_proj.bias) (E·D,): what dt() reports before any forward pass."""
        return F.softplus(self.dt_proj.bias).detach()

    def _scan_inputs(self, x: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """What the selective scan reads from x (B, T, D): u, z, Δt before its bias and softplus (B, T, E·D each),
        B, C (B, T, N) and A (E·D, N)."""
        u, z = self.in_proj(x).chunk(2, dim=-1)  # B T E·D, B T E·D
        if self.scan == "compiled_conv":
            u = self._compiled_conv(u)  # B T E·D
        else:
            u = F.silu(causal_depthwise(u, self.conv1d.weight, self.conv1d.bias)[0])  # B T E·D: conv1d's, causal
        rank, n = self.config.dt_rank, self.config.d_state
        dt_low, b, c = torch.split(self.x_proj(u), [rank, n, n], dim=-1)  # B T R, B T N, B T N
        dt_low, b, c = self._apply_layernorms(dt_low, b, c)
        dt_raw = dt_low @ self.dt_proj.weight.T  # B T E·D: dt_proj without its bias (the fused kernel adds it)
        return u, z, dt_raw, b, c, -torch.exp(self.A_log.float())  # A: E·D N

    def forward(self, x: torch.Tensor, fused: bool = False) -> torch.Tensor:
        """(B, T, D) -> (B, T, D); ``fused`` runs mamba_ssm's selective scan (CUDA only)."""
        if self.scan == "compiled_fma" and not fused:
            return self.out_proj(zero_units(self._compiled_fma(self.in_proj(x)), self.ablated, dim=-1))  # B T D
        u, z, dt_raw, b, c, a = self._scan_inputs(x)  # B T E·D, B T E·D, B T E·D, B T N, B T N, E·D N
        if fused:
            y = self._fused_scan(u, dt_raw, a, b, c, z)  # B T E·D, already gated by silu(z)
            with torch.no_grad():
                self.last_dt = F.softplus(dt_raw + self.dt_proj.bias).mean(dim=(0, 1)).detach()  # E·D
        elif self.scan in ("compiled_mixer", "compiled_conv"):
            y = self._compiled_mixer(u, dt_raw, a, b, c, z)  # B T E·D, gated by silu(z)
        else:
            dt = F.softplus(dt_raw + self.dt_proj.bias)  # B T E·D
            self.last_dt = dt.detach().mean(dim=(0, 1))  # E·D
            y = self._pure_scan(u, dt, a, b, c) * F.silu(z)  # B T E·D
        return self.out_proj(zero_units(y, self.ablated, dim=-1))  # B T D

    def _compiled_conv(self, u: torch.Tensor) -> torch.Tensor:
        """silu of the causal depthwise convolution of u (B, T, E·D; in_proj's half, read in place) in one compiled
        kernel (primacy_mamba.compiled_conv), never below float32, as the scan."""
        with torch.autocast(device_type=u.device.type, enabled=False):
            u = u.to(torch.promote_types(u.dtype, torch.float32))
            return compiled_conv_silu(u, self.conv1d.weight.to(u.dtype), self.conv1d.bias)

    def _compiled_fma(self, xz: torch.Tensor) -> torch.Tensor:
        """Everything between in_proj's output xz (B, T, 2 E·D) and out_proj in one compiled map with fused
        multiply-adds (primacy_mamba.compiled_fma), y (B, T, E·D) gated; it also gives Δ's mean, which last_dt keeps.
        Never below float32, as the other scans."""
        with torch.autocast(device_type=xz.device.type, enabled=False):
            xz = xz.to(torch.promote_types(xz.dtype, torch.float32))
            y, self.last_dt = compiled_fma_mixer(xz, self.conv1d.weight, self.conv1d.bias, self.x_proj.weight,
                                                 self.dt_proj.weight, self.dt_proj.bias,
                                                 -torch.exp(self.A_log.float()), self.D.float())
        return y

    def _compiled_mixer(self, u: torch.Tensor, dt_raw: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                        c: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """softplus(Δ + bias), the scan, D·u and the silu(z) gate in one compiled kernel (primacy_mamba.compiled_mixer),
        y (B, T, E·D); it also gives Δ's mean, which last_dt keeps."""
        with torch.autocast(device_type=u.device.type, enabled=False):  # never below float32, as _pure_scan
            dtype = torch.promote_types(u.dtype, torch.float32)
            u, dt_raw, b, c, z = (tensor.to(dtype) for tensor in (u, dt_raw, b, c, z))
            y, self.last_dt = compiled_mixer_scan(u, dt_raw, self.dt_proj.bias, a, b, c, self.D.float(), z)
        return y

    def _pure_scan(self, u: torch.Tensor, dt: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor
                   ) -> torch.Tensor:
        """The scan on the pure path, y (B, T, E·D) before the gate, by ``self.scan``: ``recurrent``
        (primacy_mamba.scan), ``chunked`` (primacy_mamba.chunked), ``compiled`` (primacy_mamba.compiled; also for
        ``compiled_mixer``, ``compiled_conv`` and ``compiled_fma``, whose forward folds the gate in, when a caller wants
        the scan alone), ``parallel`` (mambapy's Blelloch scan) or ``sequential`` (mambapy's loop, the reference)."""
        scans = {"recurrent": selective_scan, "chunked": chunked_selective_scan, "compiled": compiled_selective_scan,
                 "compiled_mixer": compiled_selective_scan, "compiled_conv": compiled_selective_scan,
                 "compiled_fma": compiled_selective_scan,
                 "parallel": self.selective_scan,
                 "sequential": self.selective_scan_seq}
        # Never below float32, as mamba_ssm's kernel keeps its state: under autocast u, B and C come in bfloat16.
        with torch.autocast(device_type=u.device.type, enabled=False):
            dtype = torch.promote_types(u.dtype, torch.float32)
            u, dt, b, c = (tensor.to(dtype) for tensor in (u, dt, b, c))
            return scans[self.scan](u, dt, a, b, c, self.D.float())

    def influence(self, x: torch.Tensor) -> Influence:
        """The selective scan on this mixer's input x (B, T, D) unrolled exactly (``selective_scan_weights``, Ali,
        Zimerman & Wolf 2024); a unit is an inner channel e, its N-dim state summed exactly. values = u (B, E·D, T),
        the scan's input after the convolution and SiLU; output = the pure scan (the one forward runs on the CPU)
        before the silu(z) gate. Needs O(B·E·D·N·T²) memory."""
        batch, length = x.shape[:2]
        inner, n = self.config.d_inner, self.config.d_state
        entries = batch * inner * n * length**2  # of the (B, E·D, N, T, T) segment sums: at most 3 alive, float64
        fits_in_memory("the Mamba influence's decays", 3 * 8 * entries, batch=batch, length=length)
        with torch.no_grad():
            u, _, dt_raw, b, c, a = self._scan_inputs(x)
            dt = F.softplus(dt_raw + self.dt_proj.bias)  # B T E·D
            output = self._pure_scan(u, dt, a, b, c)  # B T E·D
            weights = selective_scan_weights(dt, a, b, c, self.D.float())  # B E·D T T
        return Influence(weights, u.transpose(1, 2), output.transpose(1, 2), "inner channel")

    def initial_state(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(h, window): the scan's state (B, E·D, N) and the last d_conv - 1 inputs of the convolution (B, E·D,
        d_conv - 1), zeros before the first position (the convolution's left padding)."""
        inner, weight = self.config.d_inner, self.in_proj.weight
        return (weight.new_zeros(batch_size, inner, self.config.d_state),
                weight.new_zeros(batch_size, inner, self.config.d_conv - 1))

    def step(self, x_t: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
             ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """One position: x_t (B, D) -> y_t (B, D), with the recurrence the scan computes over a whole sequence,
        h_t = exp(Δt_t A) h_{t-1} + Δt_t B_t u_t, y_t = C_t h_t + D u_t (then gated and projected)."""
        h, window = state  # B E·D N, B E·D d_conv-1
        u, z = self.in_proj(x_t).chunk(2, dim=-1)  # B E·D, B E·D
        window = torch.cat([window, u[:, :, None]], dim=2)  # B E·D d_conv: this position and the ones before it
        conv = (window * self.conv1d.weight[:, 0]).sum(dim=2) + self.conv1d.bias  # B E·D
        u_conv = F.silu(conv)
        rank, n = self.config.dt_rank, self.config.d_state
        dt_low, b, c = torch.split(self.x_proj(u_conv), [rank, n, n], dim=-1)  # B R, B N, B N
        dt_low, b, c = self._apply_layernorms(dt_low, b, c)
        dt = F.softplus(dt_low @ self.dt_proj.weight.T + self.dt_proj.bias)  # B E·D
        a = -torch.exp(self.A_log.float())  # E·D N
        h = torch.exp(dt[:, :, None] * a) * h + dt[:, :, None] * b[:, None, :] * u_conv[:, :, None]  # B E·D N
        y = (h @ c[:, :, None])[:, :, 0] + self.D.float() * u_conv  # B E·D
        return self.out_proj(zero_units(y * F.silu(z), self.ablated, dim=-1)), (h, window[:, :, 1:])  # B D

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

    def __init__(self, config: MambaConfig, scan: str = "recurrent") -> None:
        super().__init__()
        self.mixer = MambaMixer(config, scan)
        self.norm = RMSNorm(config.d_model, config.rms_norm_eps)

    def forward(self, x: torch.Tensor, fused: bool = False) -> torch.Tensor:
        return x + self.mixer(norm(self.norm, x, self.mixer.scan == "compiled_fma" and not fused), fused)  # B T D

    def step(self, x_t: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
             ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        y_t, state = self.mixer.step(self.norm(x_t), state)  # B D
        return x_t + y_t, state


def norm(module: RMSNorm, x: torch.Tensor, compiled: bool) -> torch.Tensor:
    """mambapy's RMSNorm of x (B, T, D), in compiled loops where ``compiled`` (scan='compiled_fma'; never below
    float32, as the scans), else the module itself."""
    if not compiled:
        return module(x)
    with torch.autocast(device_type=x.device.type, enabled=False):
        return compiled_rms_norm(x.to(torch.promote_types(x.dtype, torch.float32)), module.weight, module.eps)
