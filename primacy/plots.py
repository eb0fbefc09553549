"""Figure builders: pure functions from results to matplotlib figures (no file I/O here)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # figures are written to files; no display is needed

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.figure import Figure

CMAP = "viridis"


def _ticks(n: int) -> np.ndarray:
    step = max(1, n // 8)
    return np.arange(0, n, step)


def _span(values: np.ndarray, minimum: float = 0.3) -> tuple[float, float]:
    """Axis limits showing ``values`` with at least ``minimum`` of range, so a flat curve looks flat."""
    lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
    pad = max(0.0, minimum - (hi - lo)) / 2
    return lo - pad - 0.02, hi + pad + 0.02


def heatmap(
    matrix: np.ndarray, distractor: np.ndarray, title: str = "", vmin: float = 0.0, vmax: float = 1.0
) -> Figure:
    """Fig. 3 style: accuracy for distractors by query position on top, the study x query accuracy matrix
    below, its row means (serial-position curve) on the right and column means (query-position curve) under it.

    matrix: (L, L) study x query accuracy; distractor: (L,) accuracy of "new" answers by query position.
    """
    matrix, distractor = np.asarray(matrix, float), np.asarray(distractor, float)
    n = matrix.shape[0]
    fig = plt.figure(figsize=(6.4, 6.4), constrained_layout=True)
    grid = fig.add_gridspec(3, 3, height_ratios=[1, 8, 1.6], width_ratios=[8, 1.6, 0.35])
    ax_new, ax_mat = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[1, 0])
    ax_row, ax_col, ax_bar = fig.add_subplot(grid[1, 1]), fig.add_subplot(grid[2, 0]), fig.add_subplot(grid[1, 2])
    style = {"cmap": CMAP, "vmin": vmin, "vmax": vmax, "xticklabels": False}
    sns.heatmap(distractor[None, :], ax=ax_new, cbar=False, yticklabels=["new"], **style)
    sns.heatmap(matrix, ax=ax_mat, cbar_ax=ax_bar, cbar_kws={"label": "accuracy"}, yticklabels=False, **style)
    ticks = _ticks(n)
    ax_mat.set_yticks(ticks + 0.5, ticks)
    ax_mat.set_ylabel("study position")
    ax_new.tick_params(axis="y", rotation=0)

    positions = np.arange(n) + 0.5
    row, col = np.nanmean(matrix, axis=1), np.nanmean(matrix, axis=0)
    ax_row.plot(row, positions, color="k")
    ax_row.set_ylim(n, 0)
    ax_row.set_xlim(*_span(row))
    ax_row.set_yticks([])
    ax_row.set_xlabel("row mean")
    ax_col.plot(positions, col, color="k")
    ax_col.set_xlim(0, n)
    ax_col.set_ylim(*_span(col))
    ax_col.set_xticks(ticks + 0.5, ticks)
    ax_col.set_xlabel("query position")
    ax_col.set_ylabel("col. mean")
    for ax in (ax_row, ax_col):
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    return fig


def dt_trajectory(steps: np.ndarray, dt: np.ndarray, title: str = "") -> Figure:
    """Fig. 4 (top): at every recorded step, the channels' Δt sorted, as a heatmap of log10 Δt over training.

    steps: (S,); dt: (S, C).
    """
    ranked = np.log10(np.sort(np.asarray(dt, float), axis=1)).T  # C S: row r = the r-th smallest Δt
    fig, ax = plt.subplots(figsize=(6.4, 3.6), constrained_layout=True)
    mesh = ax.pcolormesh(np.asarray(steps), np.arange(ranked.shape[0]), ranked, cmap=CMAP, shading="nearest")
    fig.colorbar(mesh, ax=ax, label="log10 Δt")
    ax.set_xlabel("training step")
    ax.set_ylabel("channel (sorted by Δt)")
    ax.set_title(title, fontsize=10)
    return fig


def dt_histogram(initial: np.ndarray, final: np.ndarray, title: str = "", ax=None) -> Figure:
    """Fig. 4 (bottom): the distribution of Δt at initialisation and after training, on a log axis."""
    initial, final = np.asarray(initial, float), np.asarray(final, float)
    if ax is None:
        fig, ax = plt.subplots(figsize=(4.8, 3.2), constrained_layout=True)
    else:
        fig = ax.figure
    lo, hi = min(initial.min(), final.min()), max(initial.max(), final.max())
    bins = np.logspace(np.log10(lo) - 0.05, np.log10(hi) + 0.05, 30)
    ax.hist(initial, bins=bins, alpha=0.5, label="initial", color="tab:gray")
    ax.hist(final, bins=bins, alpha=0.6, label="final", color="tab:blue")
    ax.set_xscale("log")
    ax.set_xlabel("Δt")
    ax.set_ylabel("channels")
    ax.legend(frameon=False)
    ax.set_title(title, fontsize=10)
    return fig


def dt_histograms(histories: list[dict[str, np.ndarray]], names: list[str]) -> Figure:
    """Fig. 5: one panel per run, its initial and final Δt distributions (``dt_history`` dicts)."""
    cols = min(5, len(histories))
    rows = -(-len(histories) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False, constrained_layout=True)
    for ax, history, name in zip(axes.flat, histories, names):
        dt_histogram(history["dt"][0], history["dt"][-1], name, ax=ax)
    for ax in list(axes.flat)[len(histories):]:
        ax.set_axis_off()
    return fig


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
