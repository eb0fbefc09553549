"""torchmetrics for memory verification: the study x query accuracy matrix, summed across processes."""

from __future__ import annotations

import torch
from torchmetrics import Metric

from primacy.analysis.serial_position import summarize


class StudyQueryAccuracy(Metric):
    """Accumulates correct answers by (study position, query position) for old items and by query position
    for distractors. States are sums, so results are exact across batches and processes.

    update(logits (B, L), targets (B, L) in {0, 1}, study_pos (B, L) with -1 for distractors); a logit > 0
    answers "old".
    """

    full_state_update = False
    is_differentiable = False
    higher_is_better = True

    def __init__(self, n_items: int) -> None:
        super().__init__()
        self.n_items = n_items
        self.add_state("hits", torch.zeros(n_items, n_items, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("counts", torch.zeros(n_items, n_items, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("distractor_hits", torch.zeros(n_items, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("distractor_counts", torch.zeros(n_items, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, logits: torch.Tensor, targets: torch.Tensor, study_pos: torch.Tensor) -> None:
        if logits.shape[-1] != self.n_items:
            raise ValueError(f"{type(self).__name__}(n_items={self.n_items}) got {logits.shape[-1]} queries per trial")
        n = self.n_items
        correct = ((logits > 0) == targets.bool()).long()  # B L
        query_pos = torch.arange(n, device=logits.device).expand_as(study_pos)  # B L
        old = study_pos >= 0  # B L
        cell = (study_pos * n + query_pos)[old]  # flat (study, query) index of each old query
        self.hits += torch.bincount(cell, weights=correct[old], minlength=n * n).long().view(n, n)
        self.counts += torch.bincount(cell, minlength=n * n).view(n, n)
        self.distractor_hits += torch.bincount(query_pos[~old], weights=correct[~old], minlength=n).long()
        self.distractor_counts += torch.bincount(query_pos[~old], minlength=n)

    def compute(self) -> dict[str, torch.Tensor | float]:
        """``summarize``'s dict plus the summed states (hits, counts, distractor_hits, distractor_counts)."""
        states = {"hits": self.hits, "counts": self.counts,
                  "distractor_hits": self.distractor_hits, "distractor_counts": self.distractor_counts}
        return {**summarize(**states), **states}
