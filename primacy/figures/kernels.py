"""Fig. 1: continuous vs discretised HiPPO impulse responses."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure


def kernel_discrepancy(
    curves: dict[float, tuple[np.ndarray, np.ndarray]], degrees: list[int], title: str = ""
) -> Figure:
    """Fig. 1: one column per Δt, one row per state dimension n ("degree"): the continuous impulse response
    exp(τA)B (solid) beside the bilinear Ā^j B̄ / Δt (dashed), against τ = jΔt.

    curves: Δt -> (continuous, discrete), each (length, N).
    """
    dts = sorted(curves)
    fig, axes = plt.subplots(len(degrees), len(dts), figsize=(3.0 * len(dts), 1.4 * len(degrees) + 0.8),
                             squeeze=False, sharex="col", constrained_layout=True)
    for col, dt in enumerate(dts):
        continuous, discrete = curves[dt]
        tau = dt * np.arange(continuous.shape[0])
        for row, n in enumerate(degrees):
            ax = axes[row, col]
            ax.plot(tau, continuous[:, n], color="k", lw=1.2, label="exp(τA)B")
            ax.plot(tau, discrete[:, n], color="tab:orange", lw=1.0, ls="--", label="Ā^j B̄ / Δt")
            ax.tick_params(labelsize=7)
            if col == 0:
                ax.set_ylabel(f"n = {n}", fontsize=9)
        axes[0, col].set_title(f"Δt = {dt:g}", fontsize=10)
        axes[-1, col].set_xlabel("τ")
    axes[0, -1].legend(frameon=False, fontsize=7)
    fig.suptitle(title, fontsize=10)
    return fig
