"""The memory atlas: every architecture's serial-position and query-position curves at matched accuracy, and its
indices, side by side."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

INDICES = ("primacy_index", "recency_index", "early_minus_late", "early_query_decay")


@dataclass(frozen=True)
class AtlasCurves:
    """One row of the atlas: its mean ± SE curves over seeds (L,) and its indices (mean, se), None where an index is
    undefined (a list of 2 has no middle for the primacy and recency indices) or a single seed has no SE."""

    label: str
    serial_position: tuple[np.ndarray, np.ndarray]
    query_position: tuple[np.ndarray, np.ndarray]
    indices: dict[str, tuple[float | None, float | None]]


def atlas_page(rows: Sequence[AtlasCurves], title: str = "") -> Figure:
    """Accuracy by study position and by query position (positions scaled to [0, 1], as lists differ in length), one
    line per row with its standard error as a band; then each index, a dot per row with ± SE, rows top to bottom in
    the legend's order and colours, named right of the last index. A panel that would repeat another or stay empty
    is left out: the query-position curves when every row's equals its study-position curve (a task that asks each
    item in its own place, as selective copying does), and an index that no row defines."""
    colors = sns.color_palette("husl" if len(rows) > 10 else "tab10", len(rows))
    curve_keys = [("serial_position", "study position")]
    if not all(_same_curve(row.serial_position[0], row.query_position[0]) for row in rows):
        curve_keys.append(("query_position", "query position"))
    indices = [key for key in INDICES if any(row.indices.get(key, (None, None))[0] is not None for row in rows)]
    fig = plt.figure(figsize=(12, 3.4 + 0.16 * len(rows)))  # the panels left share the width
    grid = fig.add_gridspec(1, len(curve_keys) + len(indices),
                            width_ratios=[*[2.7] * len(curve_keys), *[1.5] * len(indices)], left=0.05, right=0.86,
                            bottom=0.16 + 0.04 * np.ceil(len(rows) / 6), top=0.86, wspace=0.45)
    curves = [fig.add_subplot(grid[0, i]) for i in range(len(curve_keys))]
    curves[0].set_ylabel("accuracy")  # the second's ticks are its own (its range differs), its title names it
    for ax, (key, name) in zip(curves, curve_keys):
        for row, color in zip(rows, colors):
            mean, se = getattr(row, key)
            x = np.linspace(0, 1, len(mean))
            ax.plot(x, mean, color=color, lw=1.4, label=row.label)
            ax.fill_between(x, mean - np.nan_to_num(se), mean + np.nan_to_num(se), color=color, alpha=0.2, lw=0)
        ax.set_xticks([0, 0.5, 1], ["first", "", "last"])  # positions scaled to [0, 1]
        ax.set_xlabel(name)
        ax.set_title(f"accuracy by {name}", fontsize=10)
    for i, key in enumerate(indices):
        ax = fig.add_subplot(grid[0, len(curve_keys) + i])
        for j, (row, color) in enumerate(zip(rows, colors)):
            mean, se = (np.nan if value is None else value for value in row.indices.get(key, (None, None)))
            ax.errorbar([mean], [j], xerr=[np.nan_to_num(se)], fmt="o", color=color, capsize=3, ms=4)  # no dot: NaN
        ax.axvline(0, color="0.6", lw=0.8)
        ax.margins(x=0.2)  # a dot at either end of the range stays inside the panel
        ax.set_yticks(range(len(rows)), [row.label for row in rows] if i == len(indices) - 1 else [])
        ax.yaxis.tick_right()
        ax.tick_params(axis="y", labelsize=7, length=0)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=2, steps=[1, 2, 5, 10]))  # three labels at most fit the width
        ax.tick_params(axis="x", labelsize=7)
        ax.set_title(key.replace("_", " "), fontsize=9)
    handles, labels = curves[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(6, len(rows)), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    return fig


def _same_curve(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two curves are one: equal where defined, undefined at the same positions."""
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))
