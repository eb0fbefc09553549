"""Fitting lag curves (an attention head's lag-CRP, a free-recall lag-CRP) with CMR CRPs from a grid and with a
Gaussian bump.

Both fits report the same distance (Ji-An et al. 2024): the mean squared difference between the fitted curve and
the head's curve, divided by the variance of the head's curve. CMR-like means distance < 0.5. A flat curve
(``is_flat``) has no distance: both fits refuse it, and callers check ``is_flat`` first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from primacy.analysis.behaviour.cmr.grid import FIT_LAGS, CMRGrid
from primacy.analysis.behaviour.cmr.simulation import VARIANTS
from primacy.checks import one_of
from primacy.errors import UsageError

# free recall's: -5..-1, 1..5, since lag 0 (repeating an item) is never possible in its lag-CRP
FREE_RECALL_FIT_LAGS = FIT_LAGS[FIT_LAGS != 0]
FLAT_RTOL = 1e-6  # range / max |value| below which a curve is flat: float32 rounding of attention scores
FLAT_ATOL = 1e-12  # range below which a curve near zero everywhere is flat


def is_flat(curve: np.ndarray) -> bool:
    """Whether ``curve`` is constant up to rounding: max - min <= FLAT_RTOL · max |curve| + FLAT_ATOL.

    Its variance (the distance's denominator) is then rounding noise, ~1e-33 for a float64 constant, and MSE /
    variance would be arbitrary, as likely 0 ("CMR-like") as anything else. The relative tolerance is 1e-6, not
    float64's ~1e-15, because the lag-CRPs fitted here average float32 attention scores (rounding ~1e-7 of their
    magnitude, more after sums); the absolute floor makes a curve of noise around zero flat too. Curves that are
    not flat vary by far more: a CMR CRP by >= 1e-3, an attention lag-CRP by units of its scores.
    """
    curve = np.asarray(curve, dtype=np.float64)
    return bool(np.ptp(curve) <= FLAT_RTOL * np.abs(curve).max() + FLAT_ATOL)


@dataclass(frozen=True)
class CMRFit:
    distance: float
    beta_enc: float
    beta_rec: float
    gamma_ft: float
    inv_temperature: float  # the scale that maps the (renormalised, min-subtracted) CRP onto the curve
    fitted: np.ndarray  # the aligned CRP on the fit's lags (FIT_LAGS unless given), in the curve's own units


@dataclass(frozen=True)
class GaussianFit:
    distance: float
    offset: float
    height: float
    mu: float
    sigma: float
    fitted: np.ndarray  # a + b exp(-(lag - μ)² / 2σ²) on the curve's lags


def _on_fit_lags(curve: np.ndarray, lags: np.ndarray, fit_lags: np.ndarray = FIT_LAGS) -> np.ndarray:
    lags, curve = np.asarray(lags), np.asarray(curve, dtype=np.float64)
    if curve.shape[-1] != len(lags):
        raise UsageError(f"curve has {curve.shape[-1]} values for {len(lags)} lags: they must match")
    missing = set(fit_lags.tolist()) - set(lags.tolist())
    if missing:
        raise UsageError(f"lags {sorted(lags.tolist())} miss {sorted(missing)}: the fit needs every lag of "
                         f"{fit_lags.tolist()}")
    return curve[..., [lags.tolist().index(k) for k in fit_lags]]


def _check_not_flat(curve: np.ndarray) -> None:
    if is_flat(curve):
        raise UsageError(f"the curve is flat (range {np.ptp(curve):.3g} <= {FLAT_RTOL:g} x max |curve| "
                         f"{np.abs(curve).max():.3g} + {FLAT_ATOL:g}): a fit distance needs a curve that varies")


def _distance(fitted: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Mean squared difference / variance of the target, along the last axis (the target is not flat)."""
    return ((fitted - target) ** 2).mean(-1) / target.var()


ALIGNMENTS = ("peak", "affine")


def fit_cmr(curve: np.ndarray, lags: np.ndarray, grid: CMRGrid | None = None, *, alignment: str = "peak",
            fit_lags: np.ndarray = FIT_LAGS) -> CMRFit:
    """The grid CRP closest to ``curve`` on ``fit_lags`` (-5..+5; free recall's lag-CRP leaves out lag 0, never
    possible), the CRP renormalised to sum 1 there; ``grid`` defaults to the paper's grid, the authors' published one
    shipped with primacy (``CMRGrid.paper()``).

    ``alignment="peak"`` (the paper): curve and CRP each minus its minimum, the CRP scaled so its maximum equals the
    curve's; that scale is the inverse temperature. ``alignment="affine"``: offset + scale · CRP by least squares
    (scale >= 0), the scale reported as the inverse temperature. Either way the distance is the mean squared
    difference divided by the curve's variance. A flat curve (``is_flat``) is a UsageError.
    """
    one_of("alignment", alignment, ALIGNMENTS)
    grid = CMRGrid.paper() if grid is None else grid
    fit_lags = np.asarray(fit_lags)
    curve = _on_fit_lags(curve, lags, fit_lags)
    _check_not_flat(curve)
    crps = _on_fit_lags(grid.crps, grid.lags, fit_lags)  # G K (K fit lags)
    total = crps.sum(-1, keepdims=True)  # G 1; 0 for a CRP with all its mass off the fit lags (e.g. at lag 0)
    crps = np.divide(crps, total, out=np.zeros_like(crps), where=total > 0)
    if alignment == "peak":
        target = curve - curve.min()
        crps = crps - crps.min(-1, keepdims=True)
        peak = crps.max(-1, keepdims=True)  # G 1
        scale = np.divide(target.max(), peak, out=np.zeros_like(peak), where=peak > 0)  # G 1
        fitted = crps * scale + curve.min()  # G K, back in the curve's units
    else:
        centred = crps - crps.mean(-1, keepdims=True)  # G K
        denom = (centred**2).sum(-1, keepdims=True)  # G 1
        slope = centred @ (curve - curve.mean())  # G
        scale = np.clip(np.divide(slope[:, None], denom, out=np.zeros_like(denom), where=denom > 1e-15), 0, None)
        fitted = curve.mean() + scale * centred  # G K
    distance = np.where(total[:, 0] > 0, _distance(fitted, curve), np.inf)  # G; a CRP absent there fits nothing
    best = int(distance.argmin())
    b_enc, b_rec, g_ft = grid.params[best]
    return CMRFit(float(distance[best]), float(b_enc), float(b_rec), float(g_ft), float(scale[best, 0]), fitted[best])


def fit_gaussian(curve: np.ndarray, lags: np.ndarray) -> GaussianFit:
    """a + b·exp(-(lag - μ)² / 2σ²) by least squares on the raw curve, b >= 0, μ in [min lag, max lag],
    σ in [0.1, 2·lag range]: (a, b) are solved exactly for every (μ, σ) on a dense grid, then the best cell is
    refined on a finer grid around it (no dependence on a starting point such as the maximum's value). A flat curve
    (``is_flat``) is a UsageError."""
    lags = np.asarray(lags, dtype=np.float64)
    target = np.asarray(curve, dtype=np.float64)
    if target.shape != lags.shape:
        raise UsageError(f"curve has {target.shape[-1]} values for {len(lags)} lags: they must match")
    _check_not_flat(target)
    span = lags.max() - lags.min()

    def solve(mu: np.ndarray, sigma: np.ndarray):
        bump = np.exp(-((lags - mu[:, None]) ** 2) / (2 * sigma[:, None] ** 2))  # P K
        centred_bump = bump - bump.mean(-1, keepdims=True)
        centred = target - target.mean()
        denom = (centred_bump**2).sum(-1)
        b = np.clip(np.divide(centred_bump @ centred, denom, out=np.zeros_like(denom), where=denom > 1e-12), 0, None)
        a = target.mean() - b * bump.mean(-1)
        fitted = a[:, None] + b[:, None] * bump
        return ((fitted - target) ** 2).sum(-1), a, b, fitted

    mu, sigma = np.linspace(lags.min(), lags.max(), 201), np.geomspace(0.1, 2 * span, 120)
    for _ in range(2):  # coarse, then fine around the best cell
        grid_mu, grid_sigma = (g.ravel() for g in np.meshgrid(mu, sigma, indexing="ij"))
        sse, a, b, fitted = solve(grid_mu, grid_sigma)
        best = int(sse.argmin())
        step_mu, ratio = mu[1] - mu[0], sigma[1] / sigma[0]
        mu = np.clip(np.linspace(grid_mu[best] - step_mu, grid_mu[best] + step_mu, 41), lags.min(), lags.max())
        sigma = np.clip(np.geomspace(grid_sigma[best] / ratio, grid_sigma[best] * ratio, 41), 0.1, 2 * span)
    return GaussianFit(float(_distance(fitted[best], target)), float(a[best]), float(b[best]), float(grid_mu[best]),
                       float(grid_sigma[best]), fitted[best])


def fit_free_recall(lag_crp: np.ndarray, lags: np.ndarray) -> dict[str, CMRFit | None]:
    """A free-recall ``lag_crp`` (by ``lags``) fitted on FREE_RECALL_FIT_LAGS by ``fit_cmr`` (the paper's peak
    alignment) with primacy's simulated grid of each CMR variant, ``CMRGrid.shipped`` (both variants simulated alike;
    the paper's is within 0.005 of the published ``CMRGrid.paper()``): {variant: fit}. A fit is None where the curve
    has no value at some lag of FREE_RECALL_FIT_LAGS
    (that lag was never possible, as in lists shorter than 6 or in recall that never leaves an earlier item behind)
    or is flat there (no distance)."""
    lag_crp, lags = np.asarray(lag_crp, dtype=np.float64), np.asarray(lags)
    at = np.flatnonzero(np.isin(lags, FREE_RECALL_FIT_LAGS))  # the fit lags present, in order
    curve = lag_crp[at]  # <= 10
    if len(at) < len(FREE_RECALL_FIT_LAGS) or np.isnan(curve).any() or is_flat(curve):
        return dict.fromkeys(VARIANTS)
    return {variant: fit_cmr(curve, lags[at], CMRGrid.shipped(variant), fit_lags=FREE_RECALL_FIT_LAGS)
            for variant in VARIANTS}
