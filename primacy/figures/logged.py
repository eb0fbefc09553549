"""The test values a model logged (loss, accuracy by token group, ...), over the seeds of an aggregate: one panel per
value, each seed a dot, the mean with its standard error."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from primacy.analysis.behaviour.comparison import mean_and_se

COLUMNS = 4


def logged_values(values: dict[str, np.ndarray], title: str = "") -> Figure:
    """One panel per logged value: ``values`` maps each name to its value in every run (R,), NaN where a run has
    none; the dots are the runs, the bar the mean ± standard error over the runs that have a value."""
    names = list(values)
    rows = max(1, math.ceil(len(names) / COLUMNS))
    columns = min(COLUMNS, max(1, len(names)))
    fig, axes = plt.subplots(rows, columns, figsize=(2.4 * columns, 2.2 * rows + 0.6), squeeze=False,
                             constrained_layout=True)
    for ax, name in zip(axes.flat, names):
        runs = np.asarray(values[name], dtype=float)  # R
        mean, se = mean_and_se(runs)
        ax.scatter(np.linspace(-0.15, 0.15, len(runs)), runs, s=14, color="tab:gray", zorder=2)
        ax.errorbar([0.0], [mean], yerr=[np.nan_to_num(se)], fmt="o", color="tab:blue", capsize=4, zorder=3)
        ax.set_xlim(-0.6, 0.6)
        ax.set_xticks([])
        ax.set_title(name, fontsize=9)
    for ax in list(axes.flat)[len(names):]:
        ax.set_axis_off()
    fig.suptitle(title, fontsize=10)
    return fig
