"""Exact token-to-token influence: a mixing layer written as weights over its sources, the counterpart of attention.

Legend: B batch, C units (channels or heads), T time (t the query, s the source), d a head's width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Influence:
    """One mixing layer's exact linear form on one batch of inputs, with no gradients.

    weights: (B, C, T, T); weights[b, c, t, s] is how much of source s's value reaches query t in unit c, exactly
        zero for s > t (causal).
    values: (B, C, T) or (B, C, T, d): what the weights mix, computed from the layer's input as the model computes it.
    output: the shape of ``values``: the layer's mixing output, before whatever nonlinearity follows, computed by the
        layer's own forward path (an FFT, a fused attention kernel, a scan), not from ``weights``.
    unit: what one of the C units is (``channel``, ``head``, ``inner channel``).

    Guaranteed: ``mixed()``, Σ_s weights[b, c, t, s] · values[b, c, s], equals ``output`` to rounding (float64:
    ≤ 1e-10 for the built-ins and primacy-mamba; ``primacy.testing.check_backbone`` checks it).
    """

    weights: torch.Tensor
    values: torch.Tensor
    output: torch.Tensor
    unit: str

    def mixed(self) -> torch.Tensor:
        """Σ_s weights[..., t, s] · values[..., s(, :)]: the layer's output rebuilt from its exact form."""
        if self.values.ndim == 3:
            return torch.einsum("bcts,bcs->bct", self.weights, self.values)  # B C T
        return torch.einsum("bcts,bcsd->bctd", self.weights, self.values)  # B C T d


def toeplitz(kernel: torch.Tensor, skip: torch.Tensor | None = None) -> torch.Tensor:
    """The causal convolution y[t] = Σ_{s≤t} K[t - s] u[s] (+ D u[t]) as a matrix per channel: kernel (C, T) and
    skip (C,) or None -> (C, T, T) with [c, t, s] = K[c, t - s] for s ≤ t (plus D[c] on the diagonal), 0 above it."""
    length = kernel.shape[-1]
    lag = torch.arange(length, device=kernel.device)
    lag = lag[:, None] - lag[None, :]  # T T: t - s
    weights = kernel[:, lag.clamp(min=0)] * (lag >= 0)  # C T T
    if skip is not None:
        weights = weights + torch.diag_embed(skip[:, None].expand(-1, length))  # C T T: D on the diagonal
    return weights
