"""The search of an atlas row: a bisection over its knob's values (easiest to hardest) for one whose test accuracy
falls inside the band, replayed from the pilots measured so far, so that it resumes, and reuses pilots, wherever it
stopped (``primacy.workflows.atlas.planner`` plans the runs it asks for)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Search:
    """Where a row's search stands: the values tried in order with their accuracy (None: not yet measured), then
    ``next`` (the index of the value whose pilot is needed) or ``chosen`` (the index settled on)."""

    tried: list[tuple[int, float | None]] = field(default_factory=list)
    next: int | None = None
    chosen: int | None = None
    in_band: bool = False


def search(values: tuple[Any, ...], accuracy: dict[int, float], band: tuple[float, float]) -> Search:
    """The bisection over ``values`` (easiest to hardest) replayed from the pilots measured so far (``accuracy``:
    index -> metric): from the middle value, harder while above the band, easier while below it, until a value
    lands inside it or none is left between two tried neighbours, where the tried value nearest to the band is
    chosen. Before a value not measured yet becomes the next pilot, every measured pilot, on the path or not, narrows
    the values left to bisect (``_bounds``), so that values added to an atlas file reuse the pilots that exist."""
    low, high = 0, len(values) - 1
    result = Search()
    while low <= high:
        index = (low + high) // 2
        measured = accuracy.get(index)
        if measured is None:
            narrower = _bounds(accuracy, band, low, high)
            if narrower is None:
                result.tried.append((index, None))
                result.next = index
                return result
            low, high, bounding = narrower  # bisect what the pilots leave, past the ones that bound it
            result.tried += [(i, accuracy[i]) for i in bounding if (i, accuracy[i]) not in result.tried]
            continue
        if (index, measured) not in result.tried:
            result.tried.append((index, measured))
        if band[0] <= measured <= band[1]:
            result.chosen, result.in_band = index, True
            return result
        if measured > band[1]:  # too easy: harder values lie later in the list
            low = max(low, index) + 1
        else:
            high = min(high, index) - 1
    # nearest to the band; of equals the last tried, which the bisection reached going towards the band
    result.chosen = min((i for i, _ in reversed(result.tried)), key=lambda i: _distance(accuracy[i], band))
    return result


def _bounds(accuracy: dict[int, float], band: tuple[float, float], low: int, high: int
            ) -> tuple[int, int, list[int]] | None:
    """The values still to bisect within [low, high] once every measured pilot counts, if accuracy falls as values
    get harder: past the hardest pilot above the band and before the easiest one below it; with the pilots that set
    the new ends. None when they narrow nothing, or when they disagree with that order."""
    above = [i for i, a in accuracy.items() if a > band[1]]
    below = [i for i, a in accuracy.items() if a < band[0]]
    if above and below and max(above) > min(below):
        return None
    bounding = []
    if above and max(above) + 1 > low:
        low = max(above) + 1
        bounding.append(max(above))
    if below and min(below) - 1 < high:
        high = min(below) - 1
        bounding.append(min(below))
    return (low, high, bounding) if bounding else None


def seeds_accuracy(metrics: list[float], band: tuple[float, float]) -> float:
    """A value's accuracy for the search, from its finished seeds: their mean while every one is inside the band,
    else the seed farthest outside it. So a value is chosen only with all its seeds inside, and where one leaves, the
    bisection moves away from the side it left by."""
    outside = [metric for metric in metrics if _distance(metric, band) > 0]
    if not outside:
        return float(np.mean(metrics))
    return max(outside, key=lambda metric: _distance(metric, band))


def _distance(value: float, band: tuple[float, float]) -> float:
    return max(band[0] - value, value - band[1], 0.0)
