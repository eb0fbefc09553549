"""Exact token-to-token influence: a mixing layer written as weights over its sources, the counterpart of attention.

Legend: B batch, C units (channels or heads), T time (t the query, s the source), d a head's width.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from primacy.errors import UsageError


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


def selective_scan_weights(dt: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                           d: torch.Tensor) -> torch.Tensor:
    """Mamba's selective scan h_t = exp(Δ_t A) h_{t-1} + Δ_t B_t u_t, y_t = C_t h_t + D u_t unrolled exactly (Ali,
    Zimerman & Wolf 2024, "The hidden attention of Mamba models"): Δ dt (B, T, E), A a (E, N), B and C b, c (B, T, N),
    D d (E,) -> weights (B, E, T, T) with

        weights[b, e, t, s] = Σ_n C_t[n] · exp(Σ_{s<k≤t} Δ_k[e] A[e, n]) · Δ_s[e] B_s[n]   for s ≤ t,

    plus D[e] on the diagonal and 0 above it, so that y[b, t, e] = Σ_s weights[b, e, t, s] · u[b, s, e]. The exponent
    is a segment sum (``segment_sums``: no difference of cumulative sums, so no cancellation) and never positive for
    A < 0, Δ > 0. Holds (B, E, N, T, T) entries at a time."""
    length = dt.shape[1]
    decay = torch.exp(segment_sums((dt[..., None] * a).permute(0, 2, 3, 1)))  # B E N T T
    weights = torch.einsum("btn,bents,bse,bsn->bets", c, decay, dt, b)  # B E T T
    return weights + torch.diag_embed(d[:, None].expand(-1, length))  # D on the diagonal


def segment_sums(x: torch.Tensor) -> torch.Tensor:
    """x (..., T) -> (..., T, T) with [..., t, s] = Σ_{s<k≤t} x[..., k] for s ≤ t and -inf above the diagonal, summed
    directly (as Mamba-2's segsum) rather than as a difference of cumulative sums."""
    length = x.shape[-1]
    below = torch.ones(length, length, dtype=torch.bool, device=x.device).tril(-1)  # T T: k > s
    terms = x[..., :, None].expand(*x.shape, length).masked_fill(~below, 0.0)  # ... T T: [k, s] = x_k for k > s
    sums = terms.cumsum(dim=-2)  # ... T T: [t, s] = Σ_{s<k≤t} x_k
    causal = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()  # T T
    return sums.masked_fill(~causal, float("-inf"))


Unit = tuple[int, int]  # (layer, unit), 0-based: the index into ``Backbone.influence``'s list and into its C units


def unit_pair(item: object, sizes: Sequence[int], what: str = "unit") -> Unit:
    """``item`` as a valid (layer, unit) pair of int for layers of ``sizes`` units each, or a UsageError naming it
    and the allowed ranges."""
    allowed = f"layer must lie in [0, {len(sizes) - 1}]"
    if len(set(sizes)) == 1:
        allowed += f" and {what} in [0, {sizes[0] - 1}]"
    else:
        each = "; ".join(f"layer {layer} has {what}s 0..{size - 1}" for layer, size in enumerate(sizes))
        allowed += f" ({each})"
    try:
        layer, unit = item  # type: ignore[misc]
        pair = operator.index(layer), operator.index(unit)
    except (TypeError, ValueError):
        raise UsageError(f"{what} {item!r} is invalid: it must be a (layer, {what}) pair of integers; {allowed}"
                         ) from None
    if not (0 <= pair[0] < len(sizes) and 0 <= pair[1] < sizes[pair[0]]):
        raise UsageError(f"{what} (layer, {what})={pair} is invalid: {allowed}")
    return pair


@contextmanager
def ablating(owners: Sequence[Any], units: Iterable[object], sizes: Sequence[int], what: str = "unit"
             ) -> Iterator[None]:
    """While open, each owner (one per influence layer, with an ``ablated`` frozenset of unit indices that its
    forward honours) also ablates the units ``units`` name in its layer; ``sizes`` are the layers' unit counts.

    Blocks nest: an inner block adds its units to those already ablated, and each restores what was ablated before
    it on exit, exceptions included. Raises UsageError, ablating nothing, on a pair out of range (named a ``what``)."""
    chosen = [unit_pair(item, sizes, what) for item in units]
    before = [owner.ablated for owner in owners]
    for layer, owner in enumerate(owners):
        owner.ablated = before[layer] | {unit for at, unit in chosen if at == layer}
    try:
        yield
    finally:
        for owner, ablated in zip(owners, before):
            owner.ablated = ablated


def zero_units(y: torch.Tensor, ablated: frozenset[int], dim: int) -> torch.Tensor:
    """y with the units ``ablated`` along ``dim`` set to exact zeros; y itself when none is (bitwise unchanged)."""
    if not ablated:
        return y
    off = torch.zeros(y.shape[dim], dtype=torch.bool, device=y.device)
    off[sorted(ablated)] = True
    return y.masked_fill(off.view(-1, *([1] * (y.ndim - 1 - dim % y.ndim))), 0.0)
