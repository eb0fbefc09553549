"""The one rule for words about results: when a mean over runs may be called an effect, when "neither", and when one
row may be called above another.

An effect is named only when its mean is at least ``EFFECT_SE`` standard errors from 0 (and not 0 itself), with its
n; "neither" (no effect, no difference) only when it is less. A comparison between two groups of runs is the same rule
on their difference, whose standard error is the two SEs added in quadrature (independent runs). A mean of one run
has no SE, so it supports no word.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from primacy.analysis.behaviour.comparison import mean_and_se

EFFECT_SE = 2.0
Word = Literal["positive", "negative", "neither"]
WORDS: tuple[Word, ...] = ("positive", "negative", "neither")


@dataclass(frozen=True)
class Estimate:
    """A mean with its standard error over ``n`` runs (SE = sample SD / sqrt(n); None for a single run)."""

    mean: float
    se: float | None
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Estimate:
        """Mean ± SE of per-run values (``mean_and_se``, as a group's curves are); a run without the value (NaN)
        leaves it undefined rather than averaged over the others."""
        values = np.asarray(values, dtype=np.float64)
        if values.ndim != 1 or len(values) == 0:
            raise ValueError(f"an estimate needs a non-empty list of values, got shape {values.shape}")
        if np.isnan(values).any():
            return cls(math.nan, math.nan, len(values))
        mean, se = mean_and_se(values)
        return cls(float(mean), float(se) if len(values) > 1 else None, len(values))

    def minus(self, other: Estimate) -> Estimate:
        """The difference of two independent estimates; its n is the smaller of the two."""
        se = None if self.se is None or other.se is None else math.hypot(self.se, other.se)
        return Estimate(self.mean - other.mean, se, min(self.n, other.n))

    def __str__(self) -> str:
        se = "no SE" if self.se is None else f"± {self.se:.4g}"
        return f"{self.mean:+.4g} {se} (n = {self.n})"


def word(estimate: Estimate) -> Word | None:
    """What may be said of an estimate: "positive" or "negative" at >= ``EFFECT_SE`` SE from 0, else "neither";
    None when it has no SE (a single run): then nothing may be said."""
    if estimate.se is None or not math.isfinite(estimate.mean) or not math.isfinite(estimate.se):
        return None
    if estimate.mean != 0 and abs(estimate.mean) >= EFFECT_SE * estimate.se:
        return "positive" if estimate.mean > 0 else "negative"
    return "neither"


def compare(first: Estimate, second: Estimate) -> Word | None:
    """``word`` of their difference: "positive" when the first is above the second by >= ``EFFECT_SE`` SE of the
    difference, "negative" when below, "neither" when they cannot be told apart."""
    return word(first.minus(second))
