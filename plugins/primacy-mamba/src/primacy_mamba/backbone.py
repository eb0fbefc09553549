"""MambaBackbone: a stack of Mamba (selective state-space) layers, the paper's input-dependent-Δt model."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import Literal

import torch
import torch.nn.functional as F
from mambapy.mamba import MambaConfig, RMSNorm
from primacy.backbones.base import Backbone
from primacy.backbones.influence import Influence, ablating
from primacy.checks import one_of
from primacy.errors import UsageError
from primacy.ssm.timescale import check_dt_range
from torch import nn

from primacy_mamba.block import MambaLayer, norm
from primacy_mamba.compiled import check_compiled
from primacy_mamba.compiled_fma import fma_native
from primacy_mamba.kernels import Kernel, check_kernel, log, use_fused

Scan = Literal["auto", "recurrent", "chunked", "compiled", "compiled_mixer", "compiled_conv", "compiled_fma",
               "parallel", "sequential"]
_SCANS = ("auto", "recurrent", "chunked", "compiled", "compiled_mixer", "compiled_conv", "compiled_fma", "parallel",
          "sequential")
_RECORD = "_extra_state"  # torch's state dict key for get_extra_state, under the backbone's prefix


class MambaBackbone(Backbone):
    """n_layers Mamba blocks x + Mixer(RMSNorm(x)), then a final RMSNorm (Gu & Dao 2023; mambapy's modules).

    Each mixer projects D to two branches of width E·D, runs a causal depthwise convolution and SiLU on one,
    a selective scan with input-dependent Δt, B and C on it, gates it with SiLU of the other and projects back.

    Args:
        d_model: width D of inputs and outputs.
        n_layers: stacked Mamba blocks.
        d_state: state size N per inner channel.
        d_conv: width of the causal depthwise convolution before the scan.
        expand: E, the inner width is E·D.
        dt_min, dt_max: softplus(dt_proj.bias), Δt at zero input, starts log-uniform in this range per channel.
        dt_rank: rank R of the Δt projection (E·D -> R -> E·D); None means ceil(D / 16), as in Mamba.
        kernel: ``pure`` runs the scan in PyTorch (``scan``); ``fused`` mamba_ssm's CUDA kernel (needs
            ``pip install 'primacy-mamba[cuda]'`` and the model on a GPU); ``auto`` the fused kernel when both
            hold, otherwise the pure one. Both use the same parameters, so checkpoints move between them.
        scan: the pure path's algorithm: ``auto`` (the default since primacy-mamba 0.3) is ``compiled_fma`` where the
            machine's C++ compiler builds it and the CPU fuses multiply-adds (since 0.5; ``compiled_conv`` in 0.4 and
            where the CPU does not, ``compiled_mixer`` in 0.3) and ``chunked`` (pure PyTorch) where no compiler works
            or on a GPU, said in the log; the scan it resolved to is kept in the state dict, and a
            checkpoint loaded with ``auto`` runs on the scan it was trained on (refused in one line where that scan
            cannot run); an explicit setting is always honoured.
            ``recurrent (``primacy_mamba.scan``: a loop over time with a
            hand-derived backward that recomputes the states; lean in memory), ``chunked``
            (``primacy_mamba.chunked``: the same recurrence and backward over cache-sized reused buffers, in chunks
            of about √T positions for T > 128; equal to ``recurrent`` up to rounding and faster on a CPU),
            ``compiled`` (``primacy_mamba.compiled``: the recurrence as C++ loops, built on first use by the machine's
            C++ compiler, float32 and float64 on a CPU; the fastest on a CPU, and refused in one line where no
            compiler works), ``compiled_mixer`` (``primacy_mamba.compiled_mixer``: the compiled scan with the mixer's
            softplus(Δ + bias), D·u and SiLU(z) gate in the same loops, as mamba_ssm's CUDA kernel; the same maps
            to rounding), ``compiled_conv`` (``compiled_mixer`` with the causal depthwise convolution and its SiLU
            compiled as well, ``primacy_mamba.compiled_conv``; the same maps to rounding), ``compiled_fma``
            (everything from in_proj's output to the gate in one compiled map, dt_proj inside the mixer's loops,
            every multiply-add fused, AVX-512 where the CPU has it; ``primacy_mamba.compiled_fma``; the same maps to
            rounding),
            ``parallel`` (mambapy's Blelloch scan, which keeps the states for backward; the
            default before primacy-mamba 0.2) or ``sequential`` (mambapy's step-by-step loop, the slow reference).
    """

    def __init__(
        self,
        d_model: int = 64,
        n_layers: int = 1,
        d_state: int = 16,
        d_conv: int = 4,
        expand: int = 2,
        dt_min: float = 1e-3,
        dt_max: float = 1e-1,
        dt_rank: int | None = None,
        kernel: Kernel = "auto",
        scan: Scan = "auto",
    ) -> None:
        super().__init__()
        for name, value in (("d_model", d_model), ("n_layers", n_layers), ("d_state", d_state), ("d_conv", d_conv),
                            ("expand", expand)):
            if value < 1:
                raise UsageError(f"{name}={value} is invalid: it must be at least 1")
        if dt_rank is not None and dt_rank < 1:
            raise UsageError(f"dt_rank={dt_rank} is invalid: it must be at least 1 (or null for ceil(d_model / 16))")
        check_dt_range(dt_min, dt_max)
        check_kernel(kernel)
        self.scan_setting = scan
        scan, self._scan_reason = resolve_scan(scan)
        self.d_model, self.kernel, self.scan = d_model, kernel, scan
        self.config = MambaConfig(
            d_model=d_model, n_layers=n_layers, d_state=d_state, d_conv=d_conv, expand_factor=expand,
            dt_min=dt_min, dt_max=dt_max, dt_rank="auto" if dt_rank is None else dt_rank,
            pscan=scan == "parallel", use_cuda=False,  # primacy_mamba picks the kernel itself, per forward pass
        )
        self.layers = nn.ModuleList(MambaLayer(self.config, scan) for _ in range(n_layers))
        self.norm_f = RMSNorm(d_model, self.config.rms_norm_eps)
        self._logged: str | None = None

    def get_extra_state(self) -> dict[str, str]:
        """What the state dict records besides parameters: the scan this backbone runs (``auto`` resolved)."""
        return {"scan": self.scan}

    def set_extra_state(self, state: dict[str, str | None]) -> None:
        """With ``scan='auto'``, runs on the scan the state dict was trained on (a run resumes on its path), or
        refuses in one line where that scan cannot run; an explicit scan is honoured (checkpoints move between
        scans, which agree to rounding)."""
        recorded = state.get("scan")
        if self.scan_setting != "auto" or recorded is None or recorded == self.scan:
            return
        try:
            resolve_scan(recorded)
        except UsageError as err:
            raise UsageError(f"this checkpoint was trained with scan={recorded!r}, which cannot run here ({err}); "
                             "set scan explicitly to run it on another scan (they agree to float rounding)") from None
        self._use_scan(recorded, f"scan='auto' and the checkpoint was trained with scan={recorded!r}")

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        """A state dict from before 0.3 records no scan: it loads as before (strictly), its config names its scan."""
        state_dict.setdefault(prefix + _RECORD, {"scan": None})
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _use_scan(self, scan: str, reason: str) -> None:
        self.scan, self._scan_reason, self._logged = scan, reason, None
        for layer in self.layers:
            layer.mixer.scan = scan

    def scan_on(self, device: torch.device) -> None:
        """``scan='auto'`` on a GPU without the fused kernel: the compiled scans are CPU loops, so the pure ``chunked``
        scan runs there (and is what the state dict records from then on); an explicit scan is left as asked."""
        if self.scan_setting == "auto" and device.type != "cpu" and self.scan.startswith("compiled"):
            self._use_scan("chunked", f"scan='auto' and the model is on {device.type}, where the compiled scans (CPU "
                                      "loops) cannot run")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fused, reason = use_fused(self.kernel, x.device)
        if not fused:
            self.scan_on(x.device)
        self._log_choice(fused, reason)
        for layer in self.layers:
            x = layer(x, fused)  # B T D
        return norm(self.norm_f, x, self.scan == "compiled_fma" and not fused)  # B T D

    def influence(self, x: torch.Tensor) -> list[Influence]:
        """Each layer's selective scan on x (B, T, D) unrolled exactly (``MambaMixer.influence``), in layer order;
        a unit is an inner channel (E·D per layer). Each layer's input is RMSNorm of its residual stream, as the
        pure path of forward computes it; dt() is left as it was (no forward pass is recorded)."""
        layers, last_dt = [], [layer.mixer.last_dt for layer in self.layers]
        try:
            with torch.no_grad():
                for layer in self.layers:
                    layers.append(layer.mixer.influence(layer.norm(x)))
                    x = layer(x)  # B T D, the pure path
        finally:
            for layer, dt in zip(self.layers, last_dt):
                layer.mixer.last_dt = dt
        return layers

    def dt_per_token(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The selection step each position of x (B, T, D) takes, per layer (``dt()``'s names): softplus(dt_proj(u_t)
        + bias), (B, T, E·D), as the pure path of forward computes it, without gradients; dt() is left as it was."""
        steps, last_dt = {}, [layer.mixer.last_dt for layer in self.layers]
        try:
            with torch.no_grad():
                for i, layer in enumerate(self.layers):
                    _, _, dt_raw, _, _, _ = layer.mixer._scan_inputs(layer.norm(x))  # B T E·D
                    steps[f"layer{i}"] = F.softplus(dt_raw + layer.mixer.dt_proj.bias)
                    x = layer(x)  # B T D
        finally:
            for layer, dt in zip(self.layers, last_dt):
                layer.mixer.last_dt = dt
        return steps

    def ablate(self, units: Iterable[tuple[int, int]]) -> AbstractContextManager[None]:
        """``Backbone.ablate``: a unit (layer, e) is inner channel e of a layer; its gated scan output is zero before
        the output projection, on both kernels and in step."""
        mixers = [layer.mixer for layer in self.layers]
        return ablating(mixers, units, [self.config.d_inner] * len(mixers), "inner channel")

    def initial_state(self, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, the scan's state and the convolution's window of past inputs, all zeros."""
        return [layer.mixer.initial_state(batch_size) for layer in self.layers]

    def step(self, x_t: torch.Tensor, state: list[tuple[torch.Tensor, torch.Tensor]]
             ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """One position, x_t (B, D) -> y_t (B, D), in O(1) per layer: free recall decodes each recalled item with
        one step instead of a forward pass over everything before it. Always the pure PyTorch recurrence."""
        states = []
        for layer, layer_state in zip(self.layers, state):
            x_t, layer_state = layer.step(x_t, layer_state)  # B D
            states.append(layer_state)
        return self.norm_f(x_t), states

    def _log_choice(self, fused: bool, reason: str) -> None:
        """Logs the kernel on the first forward pass, and again only if it changes (say, after moving to a GPU)."""
        kind = "compiled" if self.scan.startswith("compiled") else "pure-PyTorch"
        choice = "the fused mamba_ssm kernel" if fused else f"the {kind} {self.scan} scan"
        if choice != self._logged:
            log.info("MambaBackbone uses %s (%s; %s)", choice, reason, self._scan_reason)
            self._logged = choice

    def dt(self) -> dict[str, torch.Tensor]:
        """Per layer, the mean Δt of each inner channel (E·D,) over the batch and time of the last forward pass;
        before any forward pass, Δt at zero input, softplus(dt_proj.bias)."""
        return {f"layer{i}": (layer.mixer.last_dt if layer.mixer.last_dt is not None else layer.mixer.bias_dt())
                for i, layer in enumerate(self.layers)}


def resolve_scan(scan: str) -> tuple[str, str]:
    """The scan a ``scan`` setting runs, and why (for the log): ``auto`` is ``compiled_fma`` where a C++ compiler
    builds the library (it is built now) and the CPU fuses multiply-adds, ``compiled_conv`` where it does not, and
    ``chunked`` where no compiler works; a compiled scan asked for by name where none can be built is a one-line
    UsageError."""
    one_of("scan", scan, _SCANS)
    if scan.startswith("compiled"):
        check_compiled()
    if scan != "auto":
        return scan, f"scan={scan!r}"
    try:
        check_compiled()
    except UsageError as err:
        return "chunked", f"scan='auto', and the compiled scan cannot be built here: {err}"
    if not fma_native():
        return "compiled_conv", ("scan='auto', the machine's C++ compiler built the compiled scan and this CPU has no "
                                 "fused multiply-add (compiled_fma would compute it in software)")
    return "compiled_fma", ("scan='auto', the machine's C++ compiler built the compiled scan and this CPU fuses "
                            "multiply-adds")
