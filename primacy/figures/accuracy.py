"""Accuracy figures of the list tasks: the study x query heatmap (Fig. 3) and its page, the serial-position
curve by delay, and recognition contiguity."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from primacy.figures.style import CMAP, span, tick_positions


def heatmap(
    matrix: np.ndarray, distractor: np.ndarray, title: str = "", vmin: float = 0.0, vmax: float = 1.0,
    distractor_label: str = "new",
) -> Figure:
    """Fig. 3 style: accuracy for distractors by query position on top, the study x query accuracy matrix
    below, its row means (serial-position curve) on the right and column means (query-position curve) under it.

    matrix: (L, L) study x query accuracy; distractor: (L,) accuracy of the answers to queries about no studied item
    by query position ("new" in verification, "none" in associative recall; all NaN, a blank row, without them).
    """
    fig = plt.figure(figsize=(6.4, 6.4), constrained_layout=True)
    grid = fig.add_gridspec(1, 2, width_ratios=[9.6, 0.35])
    axes = _heatmap_panel(fig, grid[0, 0], matrix, distractor, vmin, vmax, colorbar=fig.add_subplot(grid[0, 1]))
    axes[0].set_yticks([0.5], [distractor_label], va="center")
    fig.suptitle(title, fontsize=10)
    return fig


def fig3_page(panels: list[tuple], title: str = "") -> Figure:
    """Fig. 3 on one page: every panel's heatmap (distractor row, matrix, marginal means) in one colour scale,
    four to a row, with a letter and a title each.

    panels: (letter, title, matrix (L, L), distractor (L,)) per panel, or with a fifth entry (row_se, col_se), the
    standard errors over seeds of the serial- and query-position curves (L,) each, drawn as bands; L may differ
    between panels.
    """
    values = np.concatenate([np.concatenate([np.ravel(p[2]), np.ravel(p[3])]) for p in panels])
    vmin = min(0.5, np.floor(np.nanmin(values) * 20) / 20)  # chance and up, in steps of 0.05
    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    fig = plt.figure(figsize=(3.6 * cols + 0.6, 3.9 * rows), constrained_layout=True)
    grid = fig.add_gridspec(rows, cols + 1, width_ratios=[*([9.6] * cols), 0.3])
    for k, (letter, name, matrix, distractor, *se) in enumerate(panels):
        axes = _heatmap_panel(fig, grid[k // cols, k % cols], matrix, distractor, vmin, 1.0,
                              colorbar=fig.add_subplot(grid[:, -1]) if k == 0 else None, small=True,
                              se=se[0] if se else None)
        axes[0].set_title(f"{letter}   {name}", loc="left", fontsize=9, fontweight="bold")
    fig.suptitle(title, fontsize=11)
    return fig


def _cells(ax, values: np.ndarray, vmin: float, vmax: float, colorbar=None) -> None:
    """``values`` (rows, cols) as coloured unit cells, row 0 on top, NaN left blank, no spines or ticks, and a
    borderless "accuracy" colour bar in the ``colorbar`` axes: what seaborn.heatmap draws, without the whole-figure
    draw each seaborn.heatmap call makes to check its tick labels for overlap (0.19 s of the 0.23 s it took to build
    a Fig. 3 figure, drawn at every validation)."""
    for spine in ax.spines.values():
        spine.set_visible(False)
    mesh = ax.pcolormesh(values, cmap=CMAP, vmin=vmin, vmax=vmax, linewidths=0, edgecolor="white")
    ax.set(xlim=(0, values.shape[1]), ylim=(values.shape[0], 0), xticks=[], yticks=[])
    if colorbar is not None:
        ax.figure.colorbar(mesh, colorbar, ax, label="accuracy").outline.set_linewidth(0)


def _heatmap_panel(fig: Figure, spec, matrix: np.ndarray, distractor: np.ndarray, vmin: float, vmax: float,
                   colorbar=None, small: bool = False, se: tuple[np.ndarray, np.ndarray] | None = None) -> tuple:
    """One Fig. 3 panel drawn into ``spec`` (a gridspec cell): returns its axes (new, matrix, row mean, col mean).
    ``se``: the row and column means' standard errors over seeds, drawn as grey bands."""
    matrix, distractor = np.asarray(matrix, float), np.asarray(distractor, float)
    n = matrix.shape[0]
    grid = spec.subgridspec(3, 2, height_ratios=[1, 8, 1.6], width_ratios=[8, 1.6])
    ax_new, ax_mat = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[1, 0])
    ax_row, ax_col = fig.add_subplot(grid[1, 1]), fig.add_subplot(grid[2, 0])
    _cells(ax_new, distractor[None, :], vmin, vmax)
    ax_new.set_yticks([0.5], ["new"], va="center")
    _cells(ax_mat, matrix, vmin, vmax, colorbar)
    ticks = tick_positions(n)
    ax_mat.set_yticks(ticks + 0.5, ticks)
    ax_mat.set_ylabel("study position")

    positions = np.arange(n) + 0.5
    row, col = np.nanmean(matrix, axis=1), np.nanmean(matrix, axis=0)
    ax_row.plot(row, positions, color="k")
    if se is not None:
        row_se, col_se = (np.nan_to_num(np.asarray(s, float)) for s in se)
        ax_row.fill_betweenx(positions, row - row_se, row + row_se, color="k", alpha=0.2, lw=0)
        ax_col.fill_between(positions, col - col_se, col + col_se, color="k", alpha=0.2, lw=0)
    ax_row.set_ylim(n, 0)
    ax_row.set_xlim(*span(row))
    ax_row.set_yticks([])
    ax_row.set_xlabel("row mean")
    ax_col.plot(positions, col, color="k")
    ax_col.set_xlim(0, n)
    ax_col.set_ylim(*span(col))
    ax_col.set_xticks(ticks + 0.5, ticks)
    ax_col.set_xlabel("query position")
    ax_col.set_ylabel("col. mean")
    _accuracy_ticks(ax_row.xaxis)
    _accuracy_ticks(ax_col.yaxis)
    for ax in (ax_row, ax_col):
        ax.grid(alpha=0.3)
    if small:
        for ax in (ax_new, ax_mat, ax_row, ax_col):
            ax.tick_params(labelsize=7)
            ax.xaxis.label.set_size(8)
            ax.yaxis.label.set_size(8)
    return ax_new, ax_mat, ax_row, ax_col


def _accuracy_ticks(axis) -> None:
    """Ticks for a marginal accuracy axis, whose labels share a tenth of the panel: multiples of the smallest step of
    0.1, 0.2, 0.5 and 1 that is at least 0.4 of the axis's span (so at most three ticks, never crowded), only within
    both its limits and [0, 1] (a ceiling panel read "0.9 1.0 1.1"), each labelled with one decimal."""
    low, high = sorted(axis.get_view_interval())
    step = next((s for s in (0.1, 0.2, 0.5) if s >= 0.4 * (high - low)), 1.0)
    first, last = np.ceil(max(low, 0.0) / step - 1e-9), np.floor(min(high, 1.0) / step + 1e-9)
    ticks = np.arange(first, last + 1) * step + 0.0  # + 0.0: no "-0.0"
    axis.set_ticks(ticks, [f"{t:.1f}" for t in ticks])


def delay_heatmap(delays: np.ndarray, curves: np.ndarray, title: str = "", se: np.ndarray | None = None) -> Figure:
    """The serial-position curve by delay: accuracy by (delay, study position) as cells, one row per delay, and the
    curves themselves below, one line per delay (with standard-error bands where ``se`` is given).

    delays: (D,); curves, se: (D, L), NaN where a cell has no answers.
    """
    delays, curves = np.asarray(delays), np.asarray(curves, float)
    n_delays, n = curves.shape
    fig = plt.figure(figsize=(6.4, 2.2 + 0.25 * n_delays + 2.6), constrained_layout=True)
    grid = fig.add_gridspec(2, 2, height_ratios=[0.6 + 0.25 * n_delays, 2.6], width_ratios=[9.6, 0.35])
    ax_cells, ax_curves = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[1, 0])
    _cells(ax_cells, curves, 0.0, 1.0, colorbar=fig.add_subplot(grid[0, 1]))
    ax_cells.set_yticks(np.arange(n_delays) + 0.5, [str(d) for d in delays])
    ax_cells.set_ylabel("delay")
    ticks = tick_positions(n)
    ax_cells.set_xticks(ticks + 0.5, ticks)
    colors = plt.cm.viridis(np.linspace(0.0, 0.85, n_delays))
    positions = np.arange(n)
    for k in range(n_delays):
        ax_curves.plot(positions, curves[k], "o-", ms=2.5, lw=1.0, color=colors[k], label=f"delay {delays[k]}")
        if se is not None:
            band = np.nan_to_num(np.asarray(se[k], float))
            ax_curves.fill_between(positions, curves[k] - band, curves[k] + band, color=colors[k], alpha=0.15, lw=0)
    ax_curves.set_xlim(-0.5, n - 0.5)
    ax_curves.set_ylim(*span(curves))
    ax_curves.set_xlabel("study position")
    ax_curves.set_ylabel("accuracy")
    ax_curves.grid(alpha=0.3)
    if n_delays > 1:
        ax_curves.legend(fontsize=7, ncol=min(4, n_delays))
    fig.suptitle(title, fontsize=10)
    return fig


def contiguity(lags: np.ndarray, raw: np.ndarray, controlled: np.ndarray | None = None, title: str = "",
               raw_se: np.ndarray | None = None, controlled_se: np.ndarray | None = None) -> Figure:
    """Recognition contiguity by lag d (``StudyQueryAccuracy``): the raw curve (accuracy of the queries at lag d)
    and, when given, the controlled one (that accuracy minus the accuracy of each query's own study x query cell),
    whose zero line is what a model without contiguity shows; read the controlled one, since the raw curve also
    carries the serial-position curve. Standard-error bands where ``*_se`` is given (a mean over seeds).

    lags: (2L - 1,) -(L - 1) .. L - 1; raw, controlled, raw_se, controlled_se: (2L - 1,), NaN where a lag has no
    queries (those points are left out).
    """
    panels = [("raw", raw, raw_se, "accuracy", False)]  # title, curve, SE, y label, zero line
    if controlled is not None:
        panels.append(("controlled for study and query position", controlled, controlled_se,
                       "accuracy − own cell's accuracy", True))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.2), squeeze=False, constrained_layout=True)
    lags = np.asarray(lags)
    for ax, (name, curve, se, label, zero_line) in zip(axes[0], panels):
        curve = np.asarray(curve, float)
        ax.plot(lags, curve, "o-", color="k", ms=2.5, lw=1.0)  # NaN (a lag without queries, d = 0) is a gap
        if se is not None:
            se = np.nan_to_num(np.asarray(se, float))  # one seed: no band
            ax.fill_between(lags, curve - se, curve + se, where=~np.isnan(curve), color="k", alpha=0.15, lw=0)
        if zero_line:
            ax.axhline(0.0, color="tab:red", lw=0.8, ls="--")
        ax.set_xlim(lags.min() - 0.5, lags.max() + 0.5)
        ax.set_xlabel("lag d (study position − previous old query's)")
        ax.set_ylabel(label)
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    return fig
