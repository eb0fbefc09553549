"""Figure builders: pure functions from results to matplotlib figures (no file I/O here)."""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")  # figures are written to files; no display is needed

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

CMAP = "viridis"


def _ticks(n: int) -> np.ndarray:
    step = max(1, n // 8)
    return np.arange(0, n, step)


def _span(values: np.ndarray, minimum: float = 0.3) -> tuple[float, float]:
    """Axis limits showing ``values`` with at least ``minimum`` of range, so a flat curve looks flat."""
    lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
    pad = max(0.0, minimum - (hi - lo)) / 2
    return lo - pad - 0.02, hi + pad + 0.02


def describe(settings: dict[str, Any]) -> str:
    """A run's settings for a figure title: backbone, task (unless verification), L, vocabulary, condition (if any).

    settings: ``primacy.rundir.settings.run_settings``'s dict, as summary.json stores it (a summary without ``task``
    is a verification run's)."""
    data = settings.get("data_args") or {}
    task = settings.get("task") or "verification"
    parts = [str(settings.get("backbone"))] + ([] if task == "verification" else [task])
    parts.append(f"L={settings.get('n_items')}")
    if "n_keys" in data:
        parts.append(f"keys {data['n_keys']} · values {data['n_values']}")
    elif settings.get("vocab_size") is not None:
        parts.append(f"K={settings['vocab_size']}")
    if settings.get("condition") is not None:  # free recall has none
        parts.append(str(settings["condition"]))
    return " · ".join(parts)


def fixed(x: float | None, spec: str) -> str:
    """``x`` formatted for a title; "n/a" for an undefined (null) value, e.g. an index over untested positions."""
    return "n/a" if x is None else format(x, spec)


def recall_line(n_items: int, recalled: float, intrusions: float | None, repetitions: float | None,
                recalled_se: float | None = None) -> str:
    """A free-recall figure's second title line: items recalled of L (± se over runs if given) and the rates."""
    spread = "" if recalled_se is None else f" ± {recalled_se:.1f}"
    return (f"{recalled:.1f}{spread} of {n_items} recalled · intrusions {fixed(intrusions, '.1%')} · "
            f"repetitions {fixed(repetitions, '.1%')}")


def distractor_label(task: str | None) -> str:
    """The heatmap's top-row label: the answer to a query about no studied item in ``task`` ("new" in verification,
    "none" in associative recall; reconstruction has no such queries, so its row is blank and unlabelled)."""
    return {"recall": "none", "reconstruction": ""}.get(task or "verification", "new")


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


def fig3_page(panels: list[tuple[str, str, np.ndarray, np.ndarray]], title: str = "") -> Figure:
    """Fig. 3 on one page: every panel's heatmap (distractor row, matrix, marginal means) in one colour scale,
    four to a row, with a letter and a title each.

    panels: (letter, title, matrix (L, L), distractor (L,)) per panel; L may differ between panels.
    """
    values = np.concatenate([np.concatenate([np.ravel(m), np.ravel(d)]) for _, _, m, d in panels])
    vmin = min(0.5, np.floor(np.nanmin(values) * 20) / 20)  # chance and up, in steps of 0.05
    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    fig = plt.figure(figsize=(3.6 * cols + 0.6, 3.9 * rows), constrained_layout=True)
    grid = fig.add_gridspec(rows, cols + 1, width_ratios=[*([9.6] * cols), 0.3])
    for k, (letter, name, matrix, distractor) in enumerate(panels):
        axes = _heatmap_panel(fig, grid[k // cols, k % cols], matrix, distractor, vmin, 1.0,
                              colorbar=fig.add_subplot(grid[:, -1]) if k == 0 else None, small=True)
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
                   colorbar=None, small: bool = False) -> tuple:
    """One Fig. 3 panel drawn into ``spec`` (a gridspec cell): returns its axes (new, matrix, row mean, col mean)."""
    matrix, distractor = np.asarray(matrix, float), np.asarray(distractor, float)
    n = matrix.shape[0]
    grid = spec.subgridspec(3, 2, height_ratios=[1, 8, 1.6], width_ratios=[8, 1.6])
    ax_new, ax_mat = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[1, 0])
    ax_row, ax_col = fig.add_subplot(grid[1, 1]), fig.add_subplot(grid[2, 0])
    _cells(ax_new, distractor[None, :], vmin, vmax)
    ax_new.set_yticks([0.5], ["new"], va="center")
    _cells(ax_mat, matrix, vmin, vmax, colorbar)
    ticks = _ticks(n)
    ax_mat.set_yticks(ticks + 0.5, ticks)
    ax_mat.set_ylabel("study position")

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
    if small:
        for ax in (ax_new, ax_mat, ax_row, ax_col):
            ax.tick_params(labelsize=7)
            ax.xaxis.label.set_size(8)
            ax.yaxis.label.set_size(8)
    return ax_new, ax_mat, ax_row, ax_col


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
    ticks = _ticks(n)
    ax_cells.set_xticks(ticks + 0.5, ticks)
    colors = plt.cm.viridis(np.linspace(0.0, 0.85, n_delays))
    positions = np.arange(n)
    for k in range(n_delays):
        ax_curves.plot(positions, curves[k], "o-", ms=2.5, lw=1.0, color=colors[k], label=f"delay {delays[k]}")
        if se is not None:
            band = np.nan_to_num(np.asarray(se[k], float))
            ax_curves.fill_between(positions, curves[k] - band, curves[k] + band, color=colors[k], alpha=0.15, lw=0)
    ax_curves.set_xlim(-0.5, n - 0.5)
    ax_curves.set_ylim(*_span(curves))
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


def dt_histograms(histories: list[dict[str, np.ndarray]], names: list[str], cols: int = 5) -> Figure:
    """Fig. 5: one panel per run, its initial and final Δt distributions (``dt_history`` dicts), ``cols`` a row."""
    cols = min(cols, len(histories))
    rows = -(-len(histories) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False, constrained_layout=True)
    for ax, history, name in zip(axes.flat, histories, names):
        dt_histogram(history["dt"][0], history["dt"][-1], name, ax=ax)
    for ax in list(axes.flat)[len(histories):]:
        ax.set_axis_off()
    return fig


def fig4_page(columns: list[tuple[str, list[dict[str, np.ndarray]]]], title: str = "") -> Figure:
    """Fig. 4 on one page: per setting (a column), the Δt of every channel of every seed over training (median,
    25-75 % and 5-95 % bands) above the initial and final Δt distributions, all on one log Δt axis.

    columns: (title, dt_history dicts of its seeds, each with ``steps`` (S,) and ``dt`` (S, C)).
    """
    fig, axes = plt.subplots(2, len(columns), figsize=(3.3 * len(columns), 5.6), squeeze=False, sharey="row",
                             constrained_layout=True)
    pooled = [np.concatenate([np.asarray(h["dt"], float) for h in histories], axis=1) for _, histories in columns]
    lo = min(float(dt.min()) for dt in pooled)
    hi = max(float(dt.max()) for dt in pooled)
    bins = np.logspace(np.log10(lo) - 0.05, np.log10(hi) + 0.05, 30)
    for col, ((name, histories), dt) in enumerate(zip(columns, pooled)):
        steps = np.asarray(histories[0]["steps"])  # every seed of a setting records the same steps
        top, bottom = axes[0, col], axes[1, col]
        q = np.quantile(dt, [0.05, 0.25, 0.5, 0.75, 0.95], axis=1)  # 5 S
        top.fill_between(steps, q[0], q[4], color="tab:blue", alpha=0.15, lw=0, label="5-95 %")
        top.fill_between(steps, q[1], q[3], color="tab:blue", alpha=0.35, lw=0, label="25-75 %")
        top.plot(steps, q[2], color="tab:blue", lw=1.2, label="median")
        top.set_yscale("log")
        top.set_xlabel("training step")
        top.set_title(name, fontsize=9)
        top.grid(alpha=0.3)
        bottom.hist(dt[0], bins=bins, alpha=0.5, color="tab:gray", label="initial")
        bottom.hist(dt[-1], bins=bins, alpha=0.6, color="tab:blue", label="final")
        bottom.set_xscale("log")
        bottom.set_xlabel("Δt")
    axes[0, 0].set_ylabel("Δt (all channels, all seeds)")
    axes[1, 0].set_ylabel("channels")
    axes[0, 0].legend(frameon=False, fontsize=7)
    axes[1, 0].legend(frameon=False, fontsize=7)
    fig.suptitle(title, fontsize=11)
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
