"""Free-recall figures: recall probability, first recall and the lag-CRP with CMR fits laid over it."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator


def free_recall(spc: np.ndarray, pfr: np.ndarray, lags: np.ndarray, lag_crp: np.ndarray, title: str = "",
                cmr: list[tuple[str, np.ndarray, np.ndarray]] = (), se: dict[str, np.ndarray] | None = None,
                max_lag: int = 8) -> Figure:
    """The free-recall curves side by side, as the literature draws them: recall probability by serial position,
    probability of first recall by serial position, and the lag-CRP over lags -max_lag..max_lag with the CMR fits
    laid over it. Standard-error bands where ``se`` has the curve's key ("spc", "pfr", "lag_crp"; a mean over seeds).

    spc, pfr: (L,); lags, lag_crp: (2L - 1,), NaN where a lag was never possible (a gap); cmr: (label, fit lags,
    fitted curve) per fit, the curve in the lag-CRP's units.
    """
    se = se or {}
    fig, axes = plt.subplots(1, 3, figsize=(12.0, 3.2), constrained_layout=True)
    lags = np.asarray(lags)
    near = np.abs(lags) <= max_lag
    positions = np.arange(1, len(spc) + 1)
    panels = [(axes[0], positions, spc, "spc", "serial position", "recall probability"),
              (axes[1], positions, pfr, "pfr", "serial position", "probability of first recall"),
              (axes[2], lags[near], np.asarray(lag_crp, float)[near], "lag_crp", "lag", "conditional response prob.")]
    for ax, x, curve, key, xlabel, ylabel in panels:
        curve = np.asarray(curve, float)
        ax.plot(x, curve, "o-", color="k", ms=2.5, lw=1.0, label="model")
        if key in se:
            band = np.nan_to_num(np.asarray(se[key], float)[near if key == "lag_crp" else slice(None)])
            ax.fill_between(x, curve - band, curve + band, where=~np.isnan(curve), color="k", alpha=0.15, lw=0)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # positions and lags are whole numbers
        ax.set_ylim(0.0, max(0.05, float(np.nanmax(curve, initial=0.0))) * 1.1)
        ax.grid(alpha=0.3)
    for (label, fit_lags, fitted), color in zip(cmr, ("tab:red", "tab:blue", "tab:green")):
        fit_lags, fitted = np.asarray(fit_lags, float), np.asarray(fitted, float)
        gaps = np.flatnonzero(np.diff(fit_lags) > 1) + 1  # lag 0 is not fitted: no line across it
        axes[2].plot(np.insert(fit_lags, gaps, np.nan), np.insert(fitted, gaps, np.nan), "-", color=color, lw=1.2,
                     label=label)
    axes[2].legend(fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=10)
    return fig


def cmr_overlays(cmr_fit: dict[str, Any]) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """A summary's ``cmr_fit`` entry (``results.cmr_fit_entry``) as ``free_recall``'s overlays, one per variant
    fitted, labelled with its distance."""
    lags = np.asarray(cmr_fit["lags"])
    return [(f"CMR {variant} (d = {fit['distance']:.3f})", lags, np.asarray(fit["curve"], float))
            for variant, fit in cmr_fit.items() if variant != "lags" and fit is not None]
