"""Δt figures (Fig. 4): every channel's Δt over training, and its distribution before and after; and the Δt each
position takes (Mamba's selection step, beside a fixed Δt), over training and, at the end, on new and seen tokens."""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from primacy.figures.style import CMAP


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


def token_dt(steps: np.ndarray, dt: np.ndarray, layers: list[str], channels: list[int], title: str = "") -> Figure:
    """Δt by position: per layer, the channels' median log10 Δt at each position over training (top, a heatmap) and
    at the last recorded step with its 25-75 % band over channels (bottom). A fixed Δt gives vertical stripes and a
    flat line; a selective one shows which positions open (large Δt: the state takes the token in) or close the gate.

    steps: (S,); dt: (S, T, C), C = sum(channels), the layers' channels side by side in ``layers`` order.
    """
    log_dt = np.log10(np.asarray(dt, float))  # S T C
    bounds = np.cumsum([0, *channels])
    fig, axes = plt.subplots(2, len(layers), figsize=(max(6.4, 4.2 * len(layers)), 5.6), squeeze=False,
                             constrained_layout=True)
    positions = np.arange(log_dt.shape[1])
    for i, name in enumerate(layers):
        layer = log_dt[:, :, bounds[i] : bounds[i + 1]]  # S T C_i
        mesh = axes[0, i].pcolormesh(positions, np.asarray(steps), np.median(layer, axis=2), cmap=CMAP,
                                     shading="nearest")
        fig.colorbar(mesh, ax=axes[0, i], label="median log10 Δt")
        axes[0, i].set_ylabel("training step")
        axes[0, i].set_title(name, fontsize=10)
        low, mid, high = np.quantile(layer[-1], (0.25, 0.5, 0.75), axis=1)  # T each
        axes[1, i].fill_between(positions, low, high, alpha=0.3, color="tab:blue", label="25-75 % of channels")
        axes[1, i].plot(positions, mid, color="tab:blue", label="median")
        axes[1, i].set_xlabel("position")
        axes[1, i].set_ylabel(f"log10 Δt at step {int(steps[-1])}")
        axes[1, i].legend(frameon=False, fontsize=8)
    fig.suptitle(textwrap.fill(title, 80), fontsize=10)
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


def dt_by_role(columns: list[tuple[str, list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]], boundary: int,
               boundary_label: str, title: str) -> Figure:
    """Δ by token, one panel per model: per layer the channels' median log10 Δ at each position on new tokens (solid)
    and on tokens seen earlier in the sequence (dashed), mean ± SE over seeds; a dotted line where ``boundary``
    starts (``boundary_label``: the probes, the repeat). A fixed Δt gives one flat line for both.

    columns: (title, layer names, new mean, new SE, repeat mean, repeat SE), each array (layers, T) with NaN where
    no sequence has that kind of token."""
    fig, axes = plt.subplots(1, len(columns), figsize=(4.2 * len(columns) + 0.4, 3.4), squeeze=False,
                             constrained_layout=True)
    for ax, (label, layers, new, new_se, repeat, repeat_se) in zip(axes[0], columns):
        positions = np.arange(new.shape[1])
        palette = plt.get_cmap("viridis")(np.linspace(0.1, 0.8, len(layers)))
        for i, name in enumerate(layers):
            for mean, se, style, kind in ((new[i], new_se[i], "-", "new"), (repeat[i], repeat_se[i], "--", "seen")):
                ax.plot(positions, mean, style, color=palette[i], lw=1.2, label=f"{name}, {kind}")
                ax.fill_between(positions, mean - np.nan_to_num(se), mean + np.nan_to_num(se), color=palette[i],
                                alpha=0.15, lw=0)
        ax.axvline(boundary - 0.5, color="0.5", ls=":", lw=0.8)
        ax.text(boundary, 1.0, f" {boundary_label}", transform=ax.get_xaxis_transform(), va="top", fontsize=7,
                color="0.4")
        ax.set_title(textwrap.fill(label, 40), fontsize=9)
        ax.set_xlabel("position")
        ax.legend(fontsize=7, frameon=False)
    axes[0, 0].set_ylabel("median log10 Δ over channels")
    fig.suptitle(textwrap.fill(title, 100), fontsize=10)
    return fig
