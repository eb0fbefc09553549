"""The phenomena of human free recall as numbers one member has (a person from their lists, a model's seed from its
test lists), read off that member's curves (``free_recall.summarize``), so that a group's value is a mean over members
with its standard error, as every other number beside people is.

* ``recency_index`` and ``primacy_index``: of the recall-probability curve (``serial_position.position_indices``: the
  last and the first q = max(1, L // 4) positions, each minus the middle).
* ``first_recall_last``: the probability that recall starts with one of the last q items (the sum of the
  probability of first recall over them). Starting anywhere at random gives q / L (``first_recall_chance``); people
  start at the end of the list far more often.
* ``forward_asymmetry``: the lag-CRP at +1 minus at -1 (``comparison.indices``' forward_asymmetry, of one member).

A value is NaN where its curve is: a member with no correct first recall has no ``first_recall_last``, one that never
made a transition at lag +1 or -1 no ``forward_asymmetry``.
"""

from __future__ import annotations

import math

import torch

from primacy.analysis.behaviour.free_recall import FreeRecallCurves
from primacy.analysis.behaviour.serial_position import position_indices, quarter

PHENOMENA = ("recency_index", "primacy_index", "first_recall_last", "forward_asymmetry")


def first_recall_chance(n_items: int) -> float:
    """q / L: ``first_recall_last`` of a member that starts recall at a position drawn uniformly from the list."""
    return quarter(n_items) / n_items


def phenomena(curves: FreeRecallCurves) -> dict[str, float]:
    """The ``PHENOMENA`` of one member's curves (module docstring). E.g. at L = 4 (q = 1), recall probability
    (1.0, 0.5, 0.5, 1.0), first recall (0.0, 0.0, 0.0, 1.0) and lag-CRP 0.6 at +1 and 0.2 at -1 give recency 0.5,
    primacy 0.5, first_recall_last 1.0 and forward_asymmetry 0.4."""
    n = len(curves.spc)
    indices = position_indices(curves.spc)
    lag = {int(k): float(v) for k, v in zip(curves.lags, curves.lag_crp)}
    first = curves.pfr[n - quarter(n):].sum()  # NaN when no list had a correct output (pfr is 0 / 0 then)
    return {"recency_index": indices["recency_index"], "primacy_index": indices["primacy_index"],
            "first_recall_last": float(first) if not torch.isnan(curves.pfr).any() else math.nan,
            "forward_asymmetry": lag.get(1, math.nan) - lag.get(-1, math.nan)}
