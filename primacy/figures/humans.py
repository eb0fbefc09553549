"""Models beside people: the free-recall curves of trained models and of a human dataset on the same axes."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from primacy.analysis.behaviour.comparison import COMPARED_LAGS, GroupCurves

PEOPLE_COLOR = "k"
# one colour a model, tab10 without its grey (the people are black): at most nine models a figure
MODEL_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive",
                "tab:cyan")
Row = tuple[str, GroupCurves, dict[str, GroupCurves]]  # dataset name, its people, the models by label


def beside_people(rows: list[Row], title: str = "", row_titles: list[str] | None = None) -> Figure:
    """One row per dataset: recall probability and probability of first recall by serial position, and the lag-CRP
    over COMPARED_LAGS; people in black, each model in a colour, each a line with a standard-error band (over people,
    over a model's seeds); the legend gives each group's n. ``row_titles``: what each row shows, before its L. A model
    keeps its colour in every row, also where a row lacks another model."""
    labels = list(dict.fromkeys(label for _, _, models in rows for label in models))  # in order of first appearance
    if len(labels) > len(MODEL_COLORS):
        raise ValueError(f"beside_people draws at most {len(MODEL_COLORS)} models, one colour each; got {len(labels)}")
    color_of = dict(zip(labels, MODEL_COLORS))
    fig, axes = plt.subplots(len(rows), 3, figsize=(12.0, 3.3 * len(rows)), squeeze=False, constrained_layout=True)
    for i, ((name, people, models), row) in enumerate(zip(rows, axes)):
        positions = np.arange(1, people.n_items + 1)
        groups = [(f"people ({name}), n={people.members}", people, PEOPLE_COLOR, "o-")]
        groups += [(f"{label}, n={group.members}", group, color_of[label], "s-") for label, group in models.items()]
        lags = _gapped(COMPARED_LAGS)  # no line or band across the missing lag 0
        for label, group, color, style in groups:
            for ax, x, mean, se in ((row[0], positions, group.mean["spc"], group.se["spc"]),
                                    (row[1], positions, group.mean["pfr"], group.se["pfr"]),
                                    (row[2], lags, _gapped(COMPARED_LAGS, group.at_lags("mean")),
                                     _gapped(COMPARED_LAGS, group.at_lags("se")))):
                ax.plot(x, mean, style, color=color, ms=2.5, lw=1.0, label=label)
                band = np.nan_to_num(se)
                ax.fill_between(x, mean - band, mean + band, where=~np.isnan(mean), color=color, alpha=0.15, lw=0)
        for ax, xlabel, ylabel in zip(row, ("serial position", "serial position", "lag"),
                                      ("recall probability", "probability of first recall",
                                       "conditional response prob.")):
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.set_ylim(0.0, 1.0)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
        shows = f"{row_titles[i]}, " if row_titles else ""
        row[0].set_title(f"{shows}L = {people.n_items}", fontsize=9, loc="left")
        row[2].legend(fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=10)
    return fig


def _gapped(lags: np.ndarray, values: np.ndarray | None = None) -> np.ndarray:
    """``values`` (or ``lags``) with NaN inserted between lag -1 and +1, so no line crosses the missing lag 0."""
    cut = int(np.searchsorted(lags, 0))
    source = lags if values is None else values
    return np.insert(np.asarray(source, float), cut, np.nan)


ParameterGroup = tuple[np.ndarray, dict[str, tuple[float, float]]]  # (members, free) values; name -> 95% interval


def fitted_parameters(groups: dict[str, ParameterGroup], free: list[str], title: str = "") -> Figure:
    """CMR's fitted parameters side by side: a panel per free parameter, a column per group (people first, in
    black; each model in its colour): every member a dot, the group's mean a bar with its bootstrap 95% interval."""
    columns = min(5, len(free))
    rows = -(-len(free) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(2.4 * columns, 2.5 * rows), squeeze=False,
                             constrained_layout=True)
    colors = [PEOPLE_COLOR, *MODEL_COLORS]
    jitter = np.random.default_rng(0)
    for j, (ax, name) in enumerate(zip(axes.flat, free)):
        for x, ((label, (values, intervals)), color) in enumerate(zip(groups.items(), colors)):
            column = values[:, j]
            few = len(column) <= 10  # a few seeds: each dot seen; many people: their density
            ax.scatter(x + jitter.uniform(-0.18, 0.18, len(column)), column, s=14 if few else 6, color=color,
                       alpha=0.8 if few else 0.35, lw=0, zorder=3 if few else 2)
            low, high = intervals[name]
            mean = column.mean()
            ax.errorbar([x], [mean], yerr=[[mean - low], [high - mean]] if np.isfinite(low) else None, fmt="_",
                        color=color, ms=14, mew=2, capsize=3, lw=1.2)
        ax.set_title(name, fontsize=9)
        ax.set_xticks(range(len(groups)), [f"{label}\nn={len(v)}" for label, (v, _) in groups.items()], fontsize=6)
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(free):]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=10)
    return fig
