"""What every figure shares: the colour map, ticks, axis spans, and the title text of a run's settings."""

from __future__ import annotations

from typing import Any

import numpy as np

CMAP = "viridis"


def tick_positions(n: int) -> np.ndarray:
    step = max(1, n // 8)
    return np.arange(0, n, step)


def span(values: np.ndarray, minimum: float = 0.3, bounds: tuple[float, float] = (0.0, 1.0)) -> tuple[float, float]:
    """Axis limits showing ``values`` with at least ``minimum`` of range, so a flat curve looks flat, the window
    shifted to stay within ``bounds`` (plus a margin of 0.02) where it can: an accuracy at the ceiling gets 0.7-1.02,
    not 0.83-1.17."""
    lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
    pad = max(0.0, minimum - (hi - lo)) / 2
    low, high = lo - pad - 0.02, hi + pad + 0.02
    shift = max(0.0, high - bounds[1] - 0.02) - max(0.0, bounds[0] - 0.02 - low)
    shift = float(np.clip(shift, -pad, pad))  # moving by at most the padding hides no value
    return low - shift, high - shift


def describe(settings: dict[str, Any]) -> str:
    """A run's settings for a figure title: backbone, task (unless verification), L, vocabulary, condition (if any),
    free recall's distractors (if any).

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
    parts += [f"{name} {data[name]}" for name in ("gap", "delay") if task == "free_recall" and data.get(name)]
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
