"""Figure builders for the attention analyses (induction heads, Ji-An et al. 2024; verification probes, Morita 2025):
pure functions, no file I/O."""

from __future__ import annotations

import textwrap

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from primacy.analysis.heads.analysis import CMR_LIKE, HeadAnalysis, HeadResult
from primacy.analysis.heads.emergence import EMERGED, LAYER_SHARE


def head_name(head: HeadResult) -> str:
    return f"L{head.layer}H{head.head}"


def attention_pattern(analysis: HeadAnalysis, head: HeadResult) -> Figure:
    """Fig. 2b: one head's attention on the first [BOS] r r prompt (r r for a model without BOS); the induction
    diagonal (key = query − n + 1) shows as a stripe in the lower-left block (second-repeat queries, first-repeat
    keys)."""
    weights = analysis.attention[analysis.at(head)]  # T T
    n, start = analysis.n_items, analysis.start
    fig, ax = plt.subplots(figsize=(5.6, 4.8), constrained_layout=True)
    sns.heatmap(weights, ax=ax, cmap="magma", vmin=0, vmax=1, square=True, cbar_kws={"label": "attention"},
                xticklabels=False, yticklabels=False)
    for edge in (start, start + n):
        ax.axhline(edge, color="w", lw=0.6)
        ax.axvline(edge, color="w", lw=0.6)
    ends = [start + n, start + 2 * n - 1]  # where the second repeat starts, the last token
    ticks, labels = np.array([0, *ends]) + 0.5, ["BOS" if start else "0", *map(str, ends)]
    ax.set_xticks(ticks, labels)
    ax.set_yticks(ticks, labels, rotation=0)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    prompt = "[BOS] r r" if start else "r r"
    ax.set_title(f"{head_name(head)} on {prompt} (n = {n}): induction score {head.induction:.2f}")
    return fig


def lag_crp_fits(analysis: HeadAnalysis, heads: list[HeadResult], variant: str) -> Figure:
    """Fig. 5a-d: each head's attention lag-CRP with the best CMR CRP and Gaussian fits."""
    fig, axes = plt.subplots(1, len(heads), figsize=(3.2 * len(heads), 3.0), constrained_layout=True, squeeze=False)
    for ax, head in zip(axes[0], heads):
        _lag_crp(ax, analysis, head, variant)
    axes[0, 0].set_ylabel("pre-softmax attention score")
    axes[0, 0].legend(fontsize=8, frameon=False)
    return fig


def _lag_crp(ax: Axes, analysis: HeadAnalysis, head: HeadResult, variant: str) -> None:
    at, lags = analysis.at(head), analysis.lags
    ax.plot(lags, analysis.lag_crps[at], "o-", color="k", label="attention")
    ax.plot(lags, analysis.cmr_fits[at], "-", color="tab:red", label=f"CMR ({variant})")
    ax.plot(lags, analysis.gaussian_fits[at], "--", color="tab:blue", label="Gaussian")
    ax.axvline(0, color="0.8", lw=0.8, zorder=0)
    ax.set_xlabel("lag")
    ax.set_title(f"{head_name(head)}: induction {head.induction:.2f}\n"
                 f"CMR d = {head.cmr_distance:.2f}, Gaussian d = {head.gaussian_distance:.2f}", fontsize=9)


def distance_vs_induction(heads: list[HeadResult]) -> Figure:
    """Fig. 5e: CMR distance against induction score, one point per head, coloured by layer."""
    fig, ax = plt.subplots(figsize=(4.4, 3.6), constrained_layout=True)
    _distance_vs_induction(ax, heads)
    return fig


def _distance_vs_induction(ax: Axes, heads: list[HeadResult]) -> None:
    layers = sorted({h.layer for h in heads})
    palette = sns.color_palette("viridis", len(layers))
    for colour, layer in zip(palette, layers):
        points = [h for h in heads if h.layer == layer]
        ax.scatter([h.induction for h in points], [h.cmr_distance for h in points], color=colour,
                   label=f"layer {layer}", s=24)
    ax.axhline(CMR_LIKE, color="0.5", ls="--", lw=0.8)
    ax.set_xlabel("induction score")
    ax.set_ylabel("CMR distance")
    ax.set_yscale("log")
    ax.legend(fontsize=8 if len(layers) <= 8 else 6, frameon=False, ncol=1 if len(layers) <= 8 else 2)


def cmr_like_share(shares: list[float], layers: list[int] | None = None) -> Figure:
    """Fig. 6: the share of CMR-like heads (distance < 0.5) in each of ``layers`` (None: 0, 1, ...)."""
    fig, ax = plt.subplots(figsize=(max(3.0, 0.6 * len(shares) + 1.6), 3.0), constrained_layout=True)
    _cmr_like_share(ax, shares, layers)
    return fig


def _cmr_like_share(ax: Axes, shares: list[float], layers: list[int] | None = None) -> None:
    layers = list(range(len(shares))) if layers is None else layers
    ax.bar(np.arange(len(shares)), shares, color="tab:red")
    ax.set_xticks(np.arange(len(shares)), [str(layer) for layer in layers])
    ax.set_xlabel("layer")
    ax.set_ylabel(f"share of heads with CMR distance < {CMR_LIKE}")
    ax.set_ylim(0, 1)


def heads_beside(models: list[tuple[str, HeadAnalysis]], variant: str) -> Figure:
    """Several models' heads on one page, a row each: the best induction head's lag-CRP with its CMR and Gaussian
    fits (Fig. 5a), CMR distance against induction score (Fig. 5e) and the share of CMR-like heads by layer
    (Fig. 6). ``models`` are (name, analysis) pairs, e.g. a published model beside models trained here."""
    fig, axes = plt.subplots(len(models), 3, figsize=(13.0, 3.4 * len(models)), constrained_layout=True,
                             squeeze=False, gridspec_kw={"width_ratios": [1.0, 1.2, 1.3]})
    for row, (name, analysis) in zip(axes, models):
        _lag_crp(row[0], analysis, analysis.by_induction()[0], variant)
        row[0].set_ylabel(f"{name}\npre-softmax attention score")
        _distance_vs_induction(row[1], analysis.heads)
        layers = sorted({h.layer for h in analysis.heads})
        shares = [float(np.mean([h.cmr_like for h in analysis.heads if h.layer == layer])) for layer in layers]
        _cmr_like_share(row[2], shares, layers)
    axes[0, 0].legend(fontsize=8, frameon=False)
    return fig


def cmr_families(params: np.ndarray, crps: np.ndarray, lags: np.ndarray, base: tuple[float, float, float],
                 variant: str) -> Figure:
    """Fig. 4 / S1: CMR lag-CRPs as one parameter varies and the other two stay at ``base`` (β_enc, β_rec, γ_FT).

    params (G, 3), crps (G, K) from a CMR grid; each panel uses the grid points nearest to ``base``.
    """
    names = ("β_enc", "β_rec", "γ_FT")
    fig, axes = plt.subplots(1, 3, figsize=(10.5, 3.0), constrained_layout=True)
    base = np.array([params[np.abs(params[:, i] - b).argmin(), i] for i, b in enumerate(base)])
    for i, ax in enumerate(axes):
        others = [k for k in range(3) if k != i]
        rows = np.flatnonzero(np.isclose(params[:, others], base[others]).all(1))
        rows = rows[np.argsort(params[rows, i])][:: max(1, len(rows) // 6)]
        colours = sns.color_palette("viridis", len(rows))
        for colour, row in zip(colours, rows):
            ax.plot(lags, crps[row], "o-", ms=2.5, color=colour, label=f"{names[i]} = {params[row, i]:.2f}")
        fixed = ", ".join(f"{names[k]} = {base[k]:.2f}" for k in others)
        ax.set_title(f"varying {names[i]} ({fixed})", fontsize=9)
        ax.set_xlabel("lag")
        ax.legend(fontsize=7, frameon=False)
    axes[0].set_ylabel(f"CRP (CMR, {variant})")
    return fig


def ablation_scores(summary: dict, k: int | str, rank_by: str) -> Figure:
    """Mean ICL score (± SE over sequences) intact, with the top-k heads ablated, with k random heads ablated (the
    mean of the draws) and with the first draw's k heads alone (the authors' single draw, when ``summary`` has it)."""
    names = {"intact": "intact", "top": f"top {k} by {rank_by}", "random": f"{k} random,\nmean of draws",
             "random_single": f"{k} random,\none draw"}
    names = {key: name for key, name in names.items() if key in summary}  # an ablation.json from before 2026-11-26
    fig, ax = plt.subplots(figsize=(4.2 + 0.8 * (len(names) - 3), 3.2), constrained_layout=True)
    x = np.arange(len(names))
    ax.bar(x, [summary[c]["mean"] for c in names], yerr=[summary[c]["se"] for c in names],
           color=["0.6", "tab:red", "tab:blue", "lightsteelblue"][: len(names)], capsize=4)
    ax.set_xticks(x, list(names.values()), fontsize=8)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_ylabel("ICL score (late − early loss)")
    return fig


def probe_attention(means: dict[str, np.ndarray], study: np.ndarray | None = None) -> Figure:
    """Verification probes: each head's attention on the study items against query position, old probes solid, new
    (distractors) dashed; rows max weight and entropy, one column per layer, and with ``study`` (a
    ``ProbeStats.study_profile()``, (layers, heads, 2, L)) a third row: the share of that weight on each study
    position. ``means`` as from ``ProbeStats.means()``: arrays (layers, heads, 2, L), probe 0 old and 1 new. The
    dotted line is uniform attention over the L study items (weight 1/L, entropy log L, share 1/L)."""
    rows = [("max_weight", "max weight on a study item", "query position"),
            ("entropy", "entropy over study items (nats)", "query position")]
    curves = dict(means)
    if study is not None:
        rows.append(("study", "share of it on each study item", "study position"))
        curves["study"] = study
    layers, heads, _, n_items = means["max_weight"].shape
    fig, axes = plt.subplots(len(rows), layers, figsize=(3.4 * layers + 0.6, 2.8 * len(rows)),
                             constrained_layout=True, squeeze=False, sharey="row")
    colours = sns.color_palette("tab10", heads)
    j = np.arange(n_items)
    for r, (measure, label, x_label) in enumerate(rows):
        uniform = np.log(n_items) if measure == "entropy" else 1 / n_items
        for layer in range(layers):
            ax = axes[r, layer]
            for head in range(heads):
                ax.plot(j, curves[measure][layer, head, 0], "-", color=colours[head], lw=1.2)
                ax.plot(j, curves[measure][layer, head, 1], "--", color=colours[head], lw=1.2)
            ax.axhline(uniform, color="0.6", ls=":", lw=0.8, zorder=0)
            if r == 0:
                ax.set_title(f"layer {layer}")
            if r == len(rows) - 1 or x_label != rows[r + 1][2]:
                ax.set_xlabel(x_label)
        axes[r, 0].set_ylabel(label)
    handles = [Line2D([], [], color=colours[h], label=f"head {h}") for h in range(heads)]
    handles += [Line2D([], [], color="k", ls="-", label="old probe"),
                Line2D([], [], color="k", ls="--", label="new probe"),
                Line2D([], [], color="0.6", ls=":", label="uniform over study items")]
    axes[0, -1].legend(handles=handles, fontsize=7, frameon=False)
    return fig


def study_weights(columns: list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]], title: str) -> Figure:
    """Memory verification, one column per model: accuracy by study position (mean ± SE over seeds) above the share
    of the queries' weight on each study position, one line per layer (mean ± SE over seeds; the dotted line is a
    flat 1/L). ``columns`` are (title, accuracy mean (L,), its SE (L,), weights mean (layers, L), their SE)."""
    width = 3.6 * len(columns) + 0.4
    fig, axes = plt.subplots(2, len(columns), figsize=(width, 5.8), constrained_layout=True, squeeze=False,
                             sharex=True, sharey="row")
    for col, (label, accuracy, accuracy_se, weights, weights_se) in enumerate(columns):
        i = np.arange(len(accuracy))
        top, bottom = axes[0, col], axes[1, col]
        top.plot(i, accuracy, "o-", ms=2.5, color="k", lw=1.2)
        top.fill_between(i, accuracy - accuracy_se, accuracy + accuracy_se, color="k", alpha=0.15, lw=0)
        top.set_title(textwrap.fill(label, 34), fontsize=9)
        palette = sns.color_palette("viridis", len(weights))
        for layer, (mean, se) in enumerate(zip(weights, weights_se)):
            bottom.plot(i, mean, "-", color=palette[layer], lw=1.3, label=f"layer {layer}")
            bottom.fill_between(i, mean - se, mean + se, color=palette[layer], alpha=0.2, lw=0)
        bottom.axhline(1 / len(accuracy), color="0.6", ls=":", lw=0.8, zorder=0)
        bottom.legend(fontsize=7, frameon=False)
        bottom.set_xlabel("study position")
        bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0, 0].set_ylabel("accuracy")
    axes[1, 0].set_ylabel("share of the query's weight\non the study items (new probes)")
    fig.suptitle(textwrap.fill(title, int(11 * width)), fontsize=11)  # about 11 characters an inch
    return fig


_EMERGENCE_PANELS = (  # (column, label); a row of the figure per line
    ("icl_score", "ICL score (late − early loss)"),
    ("top_induction", "induction score"),
    ("top_cmr_distance", "CMR distance"),
    ("cmr_like_share", f"share of heads with CMR distance < {CMR_LIKE}"),
    ("beta_enc", "β_enc"),
    ("beta_rec", "β_rec"),
    ("gamma_ft", "γ_FT"),
    ("inv_temperature", "inverse temperature"),
    ("cmr_top_cmr_distance", "CMR distance"),
    ("cmr_top_beta_enc", "β_enc"),
    ("cmr_top_beta_rec", "β_rec"),
    ("cmr_top_gamma_ft", "γ_FT"),
)
_EMERGENCE_GRID = {"left": 0.045, "right": 0.99, "bottom": 0.09, "top": 0.88, "wspace": 0.2, "hspace": 0.45}
_UNIT_RANGE = {"top_induction", "cmr_like_share", "beta_enc", "beta_rec", "gamma_ft", "cmr_top_beta_enc",
               "cmr_top_beta_rec", "cmr_top_gamma_ft"}


def emergence_page(models: list[tuple[list[dict], dict[str, list[dict]], str]], title: str) -> Figure:
    """Fig. 7 of several models, one above the other under one ``title``: each an ``emergence`` figure of its
    (rows, seeds, label)."""
    page = plt.figure(figsize=(14.0, 8.6 * len(models) + 0.4))
    heading, *parts = page.subfigures(len(models) + 1, 1, height_ratios=[0.4] + [8.6] * len(models))
    heading.suptitle(title, fontsize=12, y=0.5, va="center")  # a strip of its own above the models
    for (rows, seeds, label), part in zip(models, parts):
        emergence(rows, seeds, label, fig=part)
    return page


def emergence(rows: list[dict], seeds: dict[str, list[dict]], title: str = "", fig: Figure | None = None) -> Figure:
    """Fig. 7: the ICL score, the top induction heads' score, CMR distance and fitted CMR parameters (7d-e), the share
    of CMR-like heads, over the model and in each layer (7b), and the most CMR-like heads' distance and parameters
    (7f-g; rows without those columns, from before 2026-11-26, leave that row of panels out), against training step.
    ``rows`` are emergence rows (with ``<measure>_se`` columns when they are means over seeds, drawn as ± SE bands);
    ``seeds`` maps names to each seed's rows, drawn thin beneath. ``fig`` draws into a given figure or subfigure (a
    page of several models) instead of a new one."""
    panels = [(key, label) for key, label in _EMERGENCE_PANELS if key in rows[0]]
    if fig is None:
        fig = plt.figure(figsize=(14.0, 2.8 * len(panels) // 4))
    # a fixed grid, not the constrained layout: the solver took as long as drawing the page (tests, reproduce)
    axes = fig.subplots(len(panels) // 4, 4, sharex=True, gridspec_kw=_EMERGENCE_GRID)
    steps = np.array([row["step"] for row in rows])
    top = rows[0]["top"]
    for ax, (key, label) in zip(axes.flat, panels):
        for name, table in seeds.items():
            ax.plot([r["step"] for r in table], [r[key] for r in table], "-", color="0.7", lw=0.8, label=name)
        mean = np.array([row[key] for row in rows], dtype=float)
        ax.plot(steps, mean, "o-", ms=3, color="tab:red" if key != "icl_score" else "k", lw=1.6)
        if f"{key}_se" in rows[0]:
            se = np.array([row[f"{key}_se"] for row in rows], dtype=float)
            ax.fill_between(steps, mean - se, mean + se, color="tab:red" if key != "icl_score" else "k", alpha=0.2,
                            lw=0)
        if key == "top_induction":
            ax.axhline(EMERGED, color="0.5", ls=":", lw=0.8)
        if key in ("top_cmr_distance", "cmr_top_cmr_distance"):
            ax.axhline(CMR_LIKE, color="0.5", ls="--", lw=0.8)
        if key == "cmr_like_share":
            _layer_shares(ax, rows, steps)
        if key in _UNIT_RANGE:
            ax.set_ylim(-0.03, 1.03)
        if key in ("icl_score", "cmr_like_share"):
            ax.set_title(label, fontsize=9)
        elif key.startswith("cmr_top_"):
            ax.set_title(f"{label}, {top} most CMR-like heads", fontsize=9)
        else:
            ax.set_title(f"{label}, top {top} induction heads", fontsize=9)
    for ax in axes[-1]:
        ax.set_xlabel("training step")
    if seeds:
        axes[0, 0].plot([], [], "-", color="0.7", lw=0.8, label="each seed")
        axes[0, 0].legend(handles=axes[0, 0].get_lines()[-1:], fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def _layer_shares(ax: Axes, rows: list[dict], steps: np.ndarray) -> None:
    """Fig. 7b on the share panel: each layer's share of CMR-like heads (mean over seeds), one colour per layer."""
    layers = sorted(int(key.removeprefix(LAYER_SHARE)) for key in rows[0] if key.startswith(LAYER_SHARE)
                    and not key.endswith("_se"))
    palette = sns.color_palette("viridis", len(layers))
    for colour, layer in zip(palette, layers):
        ax.plot(steps, [row[f"{LAYER_SHARE}{layer}"] for row in rows], "-", color=colour, lw=1.1,
                label=f"layer {layer}")
    if layers:
        ax.plot([], [], "o-", ms=3, color="tab:red", label="all heads")
        ax.legend(handles=ax.get_lines()[-len(layers) - 1:], fontsize=7, frameon=False)


def head_history(steps: np.ndarray, induction: np.ndarray, cmr_distance: np.ndarray, lag_crp_peak: np.ndarray,
                 first_induction_step: int | None = None, title: str = "") -> Figure:
    """Every head's scores over training (``HeadScoreTracker``): induction score, CMR distance (a gap where the
    lag-CRP was flat) and the lag-CRP peak of the best head (highest induction score at the last step, in red).

    steps (S,); induction, cmr_distance, lag_crp_peak (S, layers, heads). ``first_induction_step`` (the first step
    with a head at induction score >= 0.5; None if none) is marked by a vertical line.
    """
    steps = np.asarray(steps)
    induction, cmr_distance = np.asarray(induction, float), np.asarray(cmr_distance, float)
    lag_crp_peak = np.asarray(lag_crp_peak)
    layers, heads = induction.shape[1:]
    best = np.unravel_index(np.nanargmax(induction[-1]), (layers, heads))  # (layer, head)
    name = f"L{best[0]}H{best[1]}"
    palette = sns.color_palette("viridis", layers)
    fig, axes = plt.subplots(1, 3, figsize=(12.0, 3.4), constrained_layout=True, sharex=True)
    for ax, values, threshold, style in ((axes[0], induction, EMERGED, ":"), (axes[1], cmr_distance, CMR_LIKE, "--")):
        for layer in range(layers):
            for head in range(heads):
                if (layer, head) != best:
                    ax.plot(steps, values[:, layer, head], "-", color=palette[layer], lw=0.9, alpha=0.6)
        ax.plot(steps, values[:, best[0], best[1]], "o-", ms=3, color="tab:red", lw=1.8, label=f"best head {name}")
        ax.axhline(threshold, color="0.5", ls=style, lw=0.8)
    axes[0].set_ylim(-0.03, 1.03)
    axes[0].set_title(f"induction score, every head (induction head from {EMERGED})", fontsize=9)
    axes[0].legend(handles=[Line2D([], [], color="tab:red", marker="o", ms=3, label=f"best head {name}")]
                   + [Line2D([], [], color=palette[layer], label=f"layer {layer}") for layer in range(layers)],
                   fontsize=7, frameon=False)
    if np.isfinite(cmr_distance).any() and np.nanmin(cmr_distance) > 0:
        axes[1].set_yscale("log")
    axes[1].set_title(f"CMR distance, every head (CMR-like below {CMR_LIKE})", fontsize=9)
    peak = lag_crp_peak[:, best[0], best[1]]
    axes[2].step(steps, peak, "o-", where="mid", ms=3, color="tab:red")
    axes[2].axhline(1, color="0.5", ls=":", lw=0.8)  # an induction head's peak
    axes[2].set_ylim(min(peak.min(), -1) - 0.5, max(peak.max(), 1) + 0.5)
    axes[2].yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[2].set_ylabel("lag")
    axes[2].set_title(f"lag-CRP peak of {name} (induction: +1)", fontsize=9)
    for ax in axes:
        if first_induction_step is not None:
            ax.axvline(first_induction_step, color="k", ls="-.", lw=0.8)
        ax.set_xlabel("training step")
    if first_induction_step is not None:
        axes[0].text(first_induction_step, 0.02, f" step {first_induction_step}", fontsize=7, va="bottom")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig
