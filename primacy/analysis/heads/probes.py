"""Where a Transformer's queries look on the verification task: each query step's attention on the study items, for
old probes (the item was studied) against new ones (distractors), per layer and head (Morita 2025, appendix).

Inputs are 2L tokens, L study items then L queries; query position j (0-based) is sequence step t = L + j, and
the study keys are steps 0 .. L - 1. Attention matrices are (..., T, T), query by key, as captured by
``TransformerBackbone.capture_attention``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from primacy.analysis.behaviour.serial_position import quarter
from primacy.analysis.heads.model import HeadModel, head_model
from primacy.errors import UsageError
from primacy.tasks.verification import CyclicDesign

PROBES = ("old", "new")  # index 0 and 1 of the probe axis
MEASURES = ("max_weight", "entropy", "study_mass", "match_weight")


@dataclass(frozen=True)
class ProbeStats:
    """Sums over trials of each measure and how many trials entered each sum, per (layer, head, probe, query
    position): arrays (layers, heads, 2, L), float64 sums and int64 counts. Stats of disjoint trials add exactly.

    A count is smaller than the number of trials where a measure is undefined: ``match_weight`` for new probes
    (always) and ``entropy`` for a query whose weight on the study keys underflowed to zero.

    ``study`` is indexed by study position instead: (layers, heads, 2, L) sums over trials and query positions of
    the share of the study keys' weight that falls on study position i, w[t, i] / Σ_i' w[t, i'], with
    ``study_counts`` (layers, heads, 2) the (trial, query) pairs that entered them (those whose study mass is > 0).
    """

    sums: dict[str, np.ndarray]
    counts: dict[str, np.ndarray]
    study: np.ndarray
    study_counts: np.ndarray

    def __add__(self, other: ProbeStats) -> ProbeStats:
        return ProbeStats({m: self.sums[m] + other.sums[m] for m in MEASURES},
                          {m: self.counts[m] + other.counts[m] for m in MEASURES},
                          self.study + other.study, self.study_counts + other.study_counts)

    def study_profile(self) -> np.ndarray:
        """Where the queries' weight on the study items falls: the mean share on each study position over every
        query position and trial, (layers, heads, 2, L) summing to 1 over the last axis; NaN where no query had
        weight on the study items. A flat profile is 1 / L; more on early positions is primacy in the weights."""
        with np.errstate(invalid="ignore", divide="ignore"):
            counts = self.study_counts[..., None]
            return np.where(counts > 0, self.study / np.maximum(counts, 1), np.nan)

    @property
    def trials(self) -> np.ndarray:
        """Trials with an old (index 0) or new (1) probe at each query position, per layer and head: (layers, heads,
        2, L); the count of ``max_weight`` and ``study_mass``."""
        return self.counts["max_weight"]

    def means(self) -> dict[str, np.ndarray]:
        """Each measure's mean over the trials that define it, (layers, heads, 2, L); NaN where none does."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return {m: np.where(self.counts[m] > 0, self.sums[m] / self.counts[m], np.nan) for m in MEASURES}


def probe_sums(weights: Sequence[torch.Tensor], study_pos: torch.Tensor) -> ProbeStats:
    """The probe statistics of one batch, summed over its trials.

    weights: per layer (B, H, 2L, 2L) post-softmax attention; study_pos: (B, L) the study position of the item each
    query asks for, -1 for a distractor (the task's ``study_pos``). For query step t = L + j and study keys i < L:
    ``max_weight`` = max_i w[t, i]; ``entropy`` = -Σ_i p_i log p_i in nats with p = w[t, :L] / Σ_i w[t, i];
    ``study_mass`` = Σ_i w[t, i]; ``match_weight`` = w[t, study_pos[j]] (old probes only).
    """
    b, n_items = study_pos.shape
    w = torch.stack(list(weights))  # layers B H T T
    if w.shape[1] != b or w.shape[-1] != 2 * n_items or w.shape[-2] != 2 * n_items:
        raise ValueError(f"attention of shape {tuple(w.shape[1:])} per layer does not fit study_pos of shape "
                         f"{tuple(study_pos.shape)}: expected (B, heads, 2L, 2L) with B, L = {b}, {n_items}")
    layers, heads = w.shape[0], w.shape[2]
    a = w[..., n_items:, :n_items].double()  # layers B H L L: query position j by study key i
    mass = a.sum(-1)  # layers B H L
    p = a / mass[..., None]  # NaN rows where the mass underflowed to zero
    entropy = -torch.special.xlogy(p, p).sum(-1)  # layers B H L
    old = study_pos >= 0  # B L
    key = study_pos.clamp_min(0)[None, :, None, :, None].expand(layers, b, heads, n_items, 1)  # layers B H L 1
    match = a.gather(-1, key).squeeze(-1)  # layers B H L
    values = {"max_weight": a.amax(-1), "entropy": entropy, "study_mass": mass, "match_weight": match}
    valid = {"max_weight": torch.ones_like(mass, dtype=torch.bool), "entropy": mass > 0,
             "study_mass": torch.ones_like(mass, dtype=torch.bool),
             "match_weight": old[None, :, None, :].expand_as(mass)}  # layers B H L each
    kind = torch.stack([old, ~old], dim=-1).double()  # B L 2: one-hot old / new
    sums, counts = {}, {}
    for m in MEASURES:
        defined = valid[m].double()  # layers B H L
        sums[m] = torch.einsum("zbhj,bjk->zhkj", torch.where(valid[m], values[m], 0.0), kind).numpy()  # layers H 2 L
        counts[m] = torch.einsum("zbhj,bjk->zhkj", defined, kind).round().long().numpy()  # layers H 2 L
    shares = torch.nan_to_num(p, nan=0.0)  # layers B H L(query) L(study); rows without study mass count nothing
    study = torch.einsum("zbhji,bjk->zhki", shares, kind).numpy()  # layers H 2 L(study)
    study_counts = torch.einsum("zbhj,bjk->zhk", valid["entropy"].double(), kind).round().long().numpy()  # layers H 2
    return ProbeStats(sums, counts, study, study_counts)


def capture_bytes(model: HeadModel, batch_size: int, n_items: int) -> int:
    """Memory the captured attention of one batch takes: pre- and post-softmax (B, H, 2L, 2L) float32 per layer."""
    return 2 * 4 * model.n_layers * batch_size * model.n_heads * (2 * n_items) ** 2


def measure_probes(model: HeadModel | nn.Module, design: CyclicDesign, n_sets: int, batch_size: int) -> ProbeStats:
    """Run ``model`` (a SequenceModel whose backbone has attention or an exact influence, or its ``HeadModel``)
    over every trial of the first ``n_sets`` sets of ``design``, ``batch_size`` trials at a time, and sum the probe
    statistics of its attention."""
    model = head_model(model)
    n_sets_available, n_items = design.study.shape
    if not 1 <= n_sets <= n_sets_available:
        raise UsageError(f"sets={n_sets} is invalid: it must lie in [1, {n_sets_available}], the sets of the test "
                         "design (the run's num_test_sets)")
    total, layers = None, list(range(model.n_layers))
    for index in torch.arange(n_sets * 2 * n_items).split(batch_size):  # the sets' trials are the first ones
        trials = design.batch(index)
        _, weights = model.attention(trials["tokens"], layers)  # layers B H T T; the readout does not change them
        stats = probe_sums(list(weights), trials["study_pos"])
        total = stats if total is None else total + stats
    return total


def early_minus_late(profile: np.ndarray) -> np.ndarray:
    """The weight on the first quarter of the study positions minus that on the last quarter (the quarters of
    ``primacy.analysis.behaviour.serial_position``), over the last axis of a ``study_profile``: 0 for a flat profile,
    > 0 where the weights favour early items (primacy), < 0 late ones (recency)."""
    q = quarter(profile.shape[-1])
    return profile[..., :q].sum(-1) - profile[..., -q:].sum(-1)


def head_summary(means: dict[str, np.ndarray]) -> list[dict]:
    """Per layer and head: each measure's mean over query positions for old and new probes, and old minus new
    (None where undefined, as for match_weight of new probes)."""
    layers, heads = means["max_weight"].shape[:2]
    rows = []
    for layer in range(layers):
        for head in range(heads):
            by_probe = {probe: {m: _mean_over_positions(means[m][layer, head, k]) for m in MEASURES}
                        for k, probe in enumerate(PROBES)}
            difference = {m: None if by_probe["old"][m] is None or by_probe["new"][m] is None
                          else by_probe["old"][m] - by_probe["new"][m] for m in MEASURES}
            rows.append({"layer": layer, "head": head, **by_probe, "old_minus_new": difference})
    return rows


def strongest_head(means: dict[str, np.ndarray]) -> dict:
    """The ``head_summary`` row of the head whose largest attention weight differs most between old and new probes
    (what ``analyze probes`` reports): the head that tells them apart. Heads are only comparable within one model,
    so over seeds this is taken per seed, not from probe statistics summed head by head."""
    rows = head_summary(means)
    return max(rows, key=lambda row: abs(row["old_minus_new"]["max_weight"] or 0.0))


def _mean_over_positions(curve: np.ndarray) -> float | None:
    defined = curve[~np.isnan(curve)]
    return float(defined.mean()) if defined.size else None
