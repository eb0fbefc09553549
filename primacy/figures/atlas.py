"""The memory atlas: every architecture's serial-position and query-position curves at matched accuracy, and its
indices, side by side."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

INDICES = ("primacy_index", "recency_index", "early_minus_late", "early_query_decay")
FAMILIES = {  # a panel of curves each, in this order; a backbone not named here goes to "other"
    "state space": ("S4Backbone", "S4DBackbone", "MambaBackbone", "HybridBackbone"),
    "recurrent": ("LSTMBackbone", "XLSTMBackbone"),
    "attention": ("TransformerBackbone",),
    "linear recurrent": ("LinearAttentionBackbone", "RetNetBackbone", "GLABackbone", "DeltaNetBackbone"),
}
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")  # within a family
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
AWAY = ("below", "above", "outside")  # where a row with no seed in the band lies
WIDEN = 1.5  # an index beyond the axis: one that alone would widen it by more than this factor, ...
SPAN = 0.4  # ... on an axis wider than this (on one narrower, a difference of 0.03 is a thirteenth of it or more)


@dataclass(frozen=True)
class AtlasCurves:
    """One row of the atlas: its mean ± SE curves over seeds (L,) and its indices (mean, se), None where an index is
    undefined (a list of 2 has no middle for the primacy and recency indices) or a single seed has no SE; the
    backbone's class name (which family of curves it joins) and each seed's accuracy (where it lies from the band)."""

    label: str
    serial_position: tuple[np.ndarray, np.ndarray]
    query_position: tuple[np.ndarray, np.ndarray]
    indices: dict[str, tuple[float | None, float | None]]
    backbone: str = ""
    seed_accuracy: tuple[float, ...] = ()


def family(backbone: str) -> str:
    """The family of ``FAMILIES`` a backbone's class name belongs to; "other" for one it does not name."""
    return next((name for name, members in FAMILIES.items() if backbone in members), "other")


def band_position(row: AtlasCurves, band: tuple[float, float] | None) -> str:
    """Where the row's seeds lie from the band: "inside" (all of them, or no band or accuracy given), "partly" (some),
    "below", "above" (all on that side) or "outside" (none inside, some on either side)."""
    if band is None or not row.seed_accuracy:
        return "inside"
    below, above = (sum(v < band[0] for v in row.seed_accuracy), sum(v > band[1] for v in row.seed_accuracy))
    n = len(row.seed_accuracy)
    if below + above == 0:
        return "inside"
    if below + above < n:
        return "partly"
    return "below" if below == n else "above" if above == n else "outside"


def row_label(row: AtlasCurves, band: tuple[float, float] | None) -> str:
    """The row's label, and for a row not wholly inside the band its mean accuracy and where its seeds lie."""
    where = band_position(row, band)
    if where == "inside":
        return row.label
    inside = sum(band[0] <= v <= band[1] for v in row.seed_accuracy)
    note = (f"{inside}/{len(row.seed_accuracy)} in band" if where == "partly" else
            "none in band" if where == "outside" else f"{where} band")
    return f"{row.label} — {np.mean(row.seed_accuracy):.2f}, {note}"


def band_summary(rows: Sequence[AtlasCurves], band: tuple[float, float], metric: str) -> str:
    """What the band holds, for the figure's title: how many rows have every seed inside it, how many some."""
    where = [band_position(row, band) for row in rows]
    text = (f"{where.count('inside')} of {len(rows)} rows with every seed in the band "
            f"({metric} {band[0]:.2f}–{band[1]:.2f})")
    if where.count("partly"):
        text += f", {where.count('partly')} more with some"
    outside = len(rows) - where.count("inside") - where.count("partly")
    return text + (f"; dashed, hollow: the {outside} with none" if outside else "")


def index_limits(values: Sequence[tuple[float | None, float | None]],
                 fit: Sequence[bool] | None = None) -> tuple[float, float]:
    """The x range of an index panel: 0 and the mean ± SE of every row with ``fit`` (all rows by default, or if none
    has it), but for a mean so far from the rest that it alone would widen a range wider than ``SPAN`` by more than
    ``WIDEN`` times (at most a quarter of those rows, the farthest first): one outlier does not flatten the others'
    differences. A mean outside the range is drawn at its edge with its value."""
    fit = [True] * len(values) if fit is None or not any(fit) else fit
    kept = sorted((mean, se or 0.0) for (mean, se), use in zip(values, fit)
                  if use and mean is not None and np.isfinite(mean))

    def span(points: list[tuple[float, float]]) -> float:
        return max(0.0, *(m + s for m, s in points)) - min(0.0, *(m - s for m, s in points))

    for _ in range(len(kept) // 4):
        if span(kept) <= SPAN:
            break
        without = {0: kept[1:], -1: kept[:-1]}  # the lowest mean left out, or the highest
        widening = {end: span(kept) / max(span(rest), 1e-9) for end, rest in without.items()}
        farthest = max(widening, key=widening.get)
        if widening[farthest] <= WIDEN:
            break
        kept = without[farthest]
    lo = min(0.0, *(m - s for m, s in kept)) if kept else 0.0
    hi = max(0.0, *(m + s for m, s in kept)) if kept else 0.0
    pad = max(0.06 * (hi - lo), 0.01)
    return lo - pad, hi + pad


def atlas_page(rows: Sequence[AtlasCurves], title: str = "", band: tuple[float, float] | None = None,
               metric: str = "overall accuracy") -> Figure:
    """Accuracy by study position and by query position (positions scaled to [0, 1], as lists differ in length), a
    panel per family of backbones, one line per row with its standard error as a band; then each index, a dot per row
    with ± SE, rows grouped by family top to bottom in the curves' colours. A row whose seeds all miss the ``band`` is
    dashed with hollow markers, and every row not wholly inside it has its accuracy in its label; the title says how
    many rows the band holds. Each index axis spans the rows with a seed in the band, a lone outlier aside
    (``index_limits``): a mean beyond it is a triangle at its edge, with its value. A panel that would repeat another
    or stay empty is left out: the query-position curves when every row's equals its study-position curve (a task
    that asks each item in its own place, as selective copying does), and an index that no row defines."""
    groups = {name: [row for row in rows if family(row.backbone) == name] for name in (*FAMILIES, "other")}
    groups = {name: members for name, members in groups.items() if members}
    ordered = [row for members in groups.values() for row in members]
    style = {id(row): (COLORS[i % len(COLORS)], MARKERS[i % len(MARKERS)])
             for members in groups.values() for i, row in enumerate(members)}
    curve_keys = [("serial_position", "study position")]
    if not all(_same_curve(row.serial_position[0], row.query_position[0]) for row in rows):
        curve_keys.append(("query_position", "query position"))
    indices = [key for key in INDICES if any(row.indices.get(key, (None, None))[0] is not None for row in rows)]
    # heights in inches, top to bottom: title, curves (each with its x label), legends, indices, footnote
    title_h, curve_h, legend_h = 0.8, 2.5, 0.1 + 0.15 * max(len(members) for members in groups.values())
    index_h, foot_h = 0.35 + 0.21 * len(ordered), 0.6
    height = title_h + curve_h * len(curve_keys) + legend_h + index_h + foot_h
    fig = plt.figure(figsize=(13, height))
    top = 1 - title_h / height
    curve_grid = fig.add_gridspec(len(curve_keys), len(groups), left=0.07, right=0.985, top=top,
                                  bottom=top - (curve_h * len(curve_keys) - 0.45) / height, wspace=0.08, hspace=0.38)
    for k, (key, name) in enumerate(curve_keys):
        for j, (group, members) in enumerate(groups.items()):
            ax = fig.add_subplot(curve_grid[k, j], sharey=fig.axes[k * len(groups)] if j else None)
            for row in members:
                _curve(ax, getattr(row, key), *style[id(row)], band_position(row, band), row_label(row, band))
            ax.set_xticks([0, 0.5, 1], ["first", "", "last"])  # positions scaled to [0, 1]
            ax.set_xlabel(name, fontsize=8, labelpad=1)
            ax.tick_params(labelsize=7)
            ax.grid(axis="y", color="0.92", lw=0.6)
            if j:
                ax.tick_params(axis="y", labelleft=False)
            else:
                ax.set_ylabel(f"accuracy by\n{name}", fontsize=9)
            if k == 0:
                ax.set_title(group, fontsize=10)
            if k == len(curve_keys) - 1:  # the family's legend under its column
                box = ax.get_position()
                fig.legend(*ax.get_legend_handles_labels(), loc="upper left", fontsize=7, frameon=False,
                           bbox_to_anchor=(box.x0 - 0.01, box.y0 - 0.4 / height), handlelength=2.4,
                           borderaxespad=0, labelspacing=0.3)
    index_top = (foot_h + index_h - 0.3) / height
    index_grid = fig.add_gridspec(1, len(indices), left=0.17, right=0.985, top=index_top, bottom=foot_h / height,
                                  wspace=0.12)
    fit = [band_position(row, band) not in AWAY for row in ordered]
    for i, key in enumerate(indices):
        _index(fig.add_subplot(index_grid[0, i]), key, ordered, style, band, fit, labels=i == 0)
    fig.text(0.17, 0.2 / height, "Each index axis spans the rows with a seed in the band, a lone outlier aside; "
             "◀ ▶: a mean beyond the axis, at its edge with its value ± SE. Bars and shading: ± SE over seeds.",
             fontsize=7, color="0.35")
    fig.suptitle(title + (f"\n{band_summary(rows, band, metric)}" if band else ""), fontsize=11,
                 y=1 - 0.12 / height, va="top")
    return fig


def _curve(ax: Axes, curve: tuple[np.ndarray, np.ndarray], color: str, marker: str, where: str, label: str) -> None:
    """One row's curve (L,) ± SE, markers at a few positions; dashed with hollow markers when no seed is in the band."""
    mean, se = curve
    x = np.linspace(0, 1, len(mean))
    away = where in AWAY
    ax.plot(x, mean, color=color, lw=1.2 if away else 1.5, ls=(0, (4, 2)) if away else "-", marker=marker, ms=4,
            mfc="white" if away else color, mew=1, markevery=max(1, len(mean) // 6), label=label)
    ax.fill_between(x, mean - np.nan_to_num(se), mean + np.nan_to_num(se), color=color, alpha=0.08 if away else 0.18,
                    lw=0)


def _index(ax: Axes, key: str, rows: list[AtlasCurves], style: dict[int, tuple[str, str]],
           band: tuple[float, float] | None, fit: list[bool], labels: bool) -> None:
    """One index, a dot ± SE per row top to bottom, on ``index_limits``: a mean beyond them a triangle at the edge."""
    values = [row.indices.get(key, (None, None)) for row in rows]
    lo, hi = index_limits(values, fit)
    for j, (row, (mean, se)) in enumerate(zip(rows, values)):
        if mean is None or not np.isfinite(mean):  # undefined: no dot
            continue
        color, marker = style[id(row)]
        away = band_position(row, band) in AWAY
        if lo <= mean <= hi:
            bars = ax.errorbar([mean], [j], xerr=[se or 0.0], fmt=marker, color=color, mfc="white" if away else color,
                               capsize=2.5, ms=4.5, mew=1, elinewidth=1)
            if away:
                bars[-1][0].set_linestyle((0, (2, 1)))
            continue
        edge, side = (hi, ">") if mean > hi else (lo, "<")
        ax.plot([edge], [j], side, color=color, mfc="white" if away else color, ms=6, clip_on=False)
        text = f"{mean:+.2f}" + (f" ± {se:.2f}" if se else "")
        ax.annotate(text.replace("-", "−"), (edge, j), xytext=(-6 if side == ">" else 6, 0),
                    textcoords="offset points", ha="right" if side == ">" else "left", va="center", fontsize=7,
                    color=color)
    ax.axvline(0, color="0.6", lw=0.8)
    ax.set_xlim(lo, hi)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
    ax.grid(axis="x", color="0.9", lw=0.6)
    ax.tick_params(axis="x", labelsize=7)
    ax.tick_params(axis="y", labelsize=7, length=0)
    ax.set_yticks(range(len(rows)), [row.label for row in rows] if labels else [])
    for tick, row in zip(ax.get_yticklabels(), rows):
        tick.set_color("0.55" if band_position(row, band) in AWAY else "0.1")
    for j in range(1, len(rows)):  # a thin line between families
        if family(rows[j].backbone) != family(rows[j - 1].backbone):
            ax.axhline(j - 0.5, color="0.75", lw=0.6)
    ax.set_title(key.replace("_", " "), fontsize=9)


def _same_curve(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two curves are one: equal where defined, undefined at the same positions."""
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))
