"""Free-recall curves of a group (a model's seeds, a study's people) as mean and standard error over its members, the
indices read off them, and the distances between two groups: how a model is put beside people.

A member's curves come from its own lists (``free_recall.summarize`` of its counts): a person's from their lists, a
seed's from its test lists. Means are over members, as psifr's curves are averaged over subjects; the standard error
is the sample standard deviation over members (ddof 1) / sqrt(members with a value), NaN with fewer than two.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from primacy.analysis.behaviour.free_recall import FreeRecallCurves
from primacy.analysis.behaviour.serial_position import position_indices
from primacy.errors import UsageError

COMPARED_LAGS = np.array([-5, -4, -3, -2, -1, 1, 2, 3, 4, 5])  # the lag-CRP's lags that distances and figures use
CURVES = ("spc", "pfr", "lag_crp")


@dataclass(frozen=True)
class GroupCurves:
    """Mean and standard error over a group's members: spc, pfr (L,) by 0-based study position; lag_crp (2L - 1,) by
    ``lags``; NaN where no member has a value."""

    members: int
    mean: dict[str, np.ndarray]
    se: dict[str, np.ndarray]
    lags: np.ndarray

    @property
    def n_items(self) -> int:
        return len(self.mean["spc"])

    def at_lags(self, key: str, lags: np.ndarray = COMPARED_LAGS) -> np.ndarray:
        """``key`` ("mean" or "se") of the lag-CRP at ``lags`` (NaN where a lag is beyond the list)."""
        values = getattr(self, key)["lag_crp"]
        index = {int(k): i for i, k in enumerate(self.lags)}
        return np.array([values[index[int(k)]] if int(k) in index else np.nan for k in lags])


def group_curves(members: Sequence[FreeRecallCurves]) -> GroupCurves:
    """The mean and standard error over ``members`` (all with the same list length) of each curve."""
    if not members:
        raise UsageError("a group needs at least one member (a seed or a person) to average over")
    lengths = {len(m.spc) for m in members}
    if len(lengths) > 1:
        raise UsageError(f"the members have lists of {sorted(lengths)} items: a group's lists must have one length")
    mean, se = {}, {}
    for key in CURVES:
        stacked = np.stack([getattr(m, key).double().cpu().numpy() for m in members])  # members x positions (or lags)
        mean[key], se[key] = mean_and_se(stacked)
    return GroupCurves(len(members), mean, se, members[0].lags.cpu().numpy())


def mean_and_se(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error over the first axis, over the members that have a value (not NaN) there: a lag that
    one member never had possible is averaged over the others. SE is NaN with fewer than two values, the mean NaN
    with none."""
    values = np.asarray(values, dtype=float)
    seen = ~np.isnan(values)
    n = seen.sum(axis=0)
    mean = np.where(seen, values, 0.0).sum(axis=0) / np.where(n > 0, n, np.nan)
    squares = np.where(seen, (values - mean) ** 2, 0.0).sum(axis=0)
    se = np.sqrt(squares / np.where(n > 1, n - 1, np.nan)) / np.sqrt(np.where(n > 1, n, np.nan))
    return mean, se


def indices(group: GroupCurves) -> dict[str, float]:
    """primacy_index, recency_index and early_minus_late of the mean recall curve (``position_indices``), and
    forward_asymmetry, the mean lag-CRP at lag +1 minus at lag -1 (how much more often recall steps forward to the
    next studied item than back to the one before)."""
    plus, minus = group.at_lags("mean", np.array([1, -1]))
    return {**position_indices(torch.from_numpy(group.mean["spc"])), "forward_asymmetry": float(plus - minus)}


def distances(model: GroupCurves, people: GroupCurves) -> dict[str, float]:
    """How far the model's mean curves are from the people's: the root-mean-square difference of the recall curve
    and of first recall over the L positions, and of the lag-CRP over COMPARED_LAGS (lags where either is undefined
    are left out), then each index of ``indices`` as model minus people."""
    if model.n_items != people.n_items:
        raise UsageError(f"the model's lists have {model.n_items} items and the people's {people.n_items}: compare "
                         "groups that studied lists of the same length")
    gaps = {"spc": model.mean["spc"] - people.mean["spc"], "pfr": model.mean["pfr"] - people.mean["pfr"],
            "lag_crp": model.at_lags("mean") - people.at_lags("mean")}
    result = {f"rmse_{key}": _rms(gap) for key, gap in gaps.items()}
    ours, theirs = indices(model), indices(people)
    return {**result, **{f"{name}_difference": ours[name] - theirs[name] for name in ours}}


def _rms(gap: np.ndarray) -> float:
    gap = gap[~np.isnan(gap)]
    return float(np.sqrt(np.mean(gap**2))) if len(gap) else float("nan")


def bootstrap_interval(values: np.ndarray, resamples: int = 10_000, seed: int = 0,
                       level: float = 0.95) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of ``values`` (n,): members resampled with replacement
    ``resamples`` times; (NaN, NaN) for fewer than 2 members."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) < 2:
        return float("nan"), float("nan")
    means = values[np.random.default_rng(seed).integers(0, len(values), (resamples, len(values)))].mean(1)
    low, high = np.percentile(means, [50 * (1 - level), 50 * (1 + level)])
    return float(low), float(high)
