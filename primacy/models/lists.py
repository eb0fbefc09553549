"""The models of the list tasks: embedding -> backbone -> an answer at each of the L query positions, scored by the
study x query accuracy matrix. SequenceModel answers old/new (memory verification); RecallModel answers with a token
(delayed reconstruction, associative recall). TaskModel holds what they share with FreeRecallModel
(primacy.models.free_recall): the embedding, the stage metrics' bookkeeping and logging, and the optimiser."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric

from primacy.backbones.base import Backbone
from primacy.checks import fits_in_memory
from primacy.metrics import StudyQueryAccuracy, old_new_correct
from primacy.models.base import Batch, TaskModel
from primacy.models.optim import Optimiser

SUMMARY_KEYS = ("overall_accuracy", "target_accuracy", "distractor_accuracy",
                "primacy_index", "recency_index", "early_minus_late")


class ListModel(TaskModel):
    """The models of the tasks scored by the study x query accuracy matrix: validation and test ``StudyQueryAccuracy``
    (``val_accuracy``, ``test_accuracy``). A subclass builds its readout and defines ``answers``: the loss and which
    answers were right, (B, L) bool, in training and evaluation alike."""

    METRIC = "accuracy"
    HEADLINE = ("overall_accuracy", "early_minus_late")
    task_sizes = frozenset({"n_items"})  # sizes the accuracy matrices

    def __init__(self, backbone: Backbone, vocab_size: int, n_items: int, optimiser: Optimiser,
                 delays: list[int] | None = None) -> None:
        super().__init__(backbone, vocab_size, optimiser)
        # n_items is the task's, checked where it is linked (primacy.contract.check_linked_sizes); built by hand, the
        # accuracy matrices refuse a bad one
        fits_in_memory("the validation and test accuracy matrices", 2 * 2 * 8 * n_items**2, n_items=n_items)
        self.val_accuracy = StudyQueryAccuracy(n_items, delays)
        self.test_accuracy = StudyQueryAccuracy(n_items, delays)

    @abstractmethod
    def answers(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean loss over the batch's answers and whether each answer is right, (B, L) bool."""

    def training_answers(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        return self.answers(batch)

    def _update(self, batch: Batch, metric: StudyQueryAccuracy, loss_mean: MeanMetric) -> None:
        loss, correct = self.answers(batch)
        metric.update(correct, batch["study_pos"], batch.get("delay"))
        loss_mean.update(loss, weight=correct.numel())

    def _summary(self, metric: StudyQueryAccuracy) -> dict[str, torch.Tensor | float]:
        result = metric.compute()
        return {k: result[k] for k in SUMMARY_KEYS}


class SequenceModel(ListModel):
    """Shared item embedding (K, H) for study and query tokens, a backbone, and a Linear(H, 1) readout at the
    L query positions, trained with binary cross-entropy (old = 1, new = 0).

    Args:
        backbone: the sequence model (any registered Backbone).
        vocab_size: K, linked from the task.
        n_items: L, linked from the task (sizes the accuracy matrices).
        **optimiser: the optimiser's settings (lr, betas, eps, weight_decay, warmup_steps): ``Optimiser``.
    """

    requires = frozenset({"tokens", "targets:old_new", "study_pos"})  # tokens: L study items, then L queries

    def __init__(
        self,
        backbone: Backbone,
        vocab_size: int = 512,
        n_items: int = 32,
        **optimiser: Any,
    ) -> None:
        super().__init__(backbone, vocab_size, n_items, Optimiser(**optimiser))
        # RunConfig logs the whole config; under the CLI the backbone is recorded as its class_path/init_args config
        self.save_hyperparameters(logger=False)
        self.readout = nn.Linear(backbone.d_model, 1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, 2L) -> logits (B, L) at the query positions (positive means "old")."""
        n_items = tokens.shape[1] // 2
        h = self.backbone(self.embedding(tokens))  # B 2L H
        return self.readout(h[:, n_items:]).squeeze(-1)  # B L

    def answers(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self(batch["tokens"])
        loss = F.binary_cross_entropy_with_logits(logits.float(), batch["targets"])
        return loss, old_new_correct(logits, batch["targets"])


class RecallModel(ListModel):
    """Token embedding (V, H) for every token of the task (items and its cue, blank and answer tokens), a backbone,
    and an unembedding Linear(H, V) read only at the L query positions ``query_index`` of the batch, trained with
    cross-entropy on the tokens to recall there (``targets``): nothing else in a sequence is predicted or scored. An
    answer is right when its most probable token is the target.

    Args:
        backbone: the sequence model (any registered Backbone).
        vocab_size: V, every token of the task's sequences; linked from the task.
        n_items: L, linked from the task (sizes the accuracy matrices).
        delays: the delays the task's evaluation trials use, linked from it (null: the task has none); the accuracy
            matrices then also count the serial-position curve by delay.
        **optimiser: the optimiser's settings (lr, betas, eps, weight_decay, warmup_steps): ``Optimiser``.
    """

    requires = frozenset({"tokens", "query_index", "targets:token", "study_pos"})  # delay, when given, is counted too

    def __init__(
        self,
        backbone: Backbone,
        vocab_size: int = 514,
        n_items: int = 32,
        delays: list[int] | None = None,
        **optimiser: Any,
    ) -> None:
        super().__init__(backbone, vocab_size, n_items, Optimiser(**optimiser), delays)
        fits_in_memory("the unembedding", 4 * vocab_size * backbone.d_model, vocab_size=vocab_size,
                       d_model=backbone.d_model)
        self.save_hyperparameters(logger=False)  # the loggers get the whole config (RunConfig)
        self.unembedding = nn.Linear(backbone.d_model, vocab_size)

    def forward(self, tokens: torch.Tensor, query_index: torch.Tensor) -> torch.Tensor:
        """tokens (B, T), query_index (B, L) positions in [0, T) -> logits (B, L, V) at those positions."""
        h = self.backbone(self.embedding(tokens))  # B T H
        at_queries = h.gather(1, query_index[..., None].expand(-1, -1, h.shape[-1]))  # B L H
        return self.unembedding(at_queries)  # B L V

    def answers(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self(batch["tokens"], batch["query_index"]).float()  # B L V
        targets = batch["targets"]  # B L
        loss = F.cross_entropy(logits.transpose(1, 2), targets)
        return loss, logits.argmax(-1) == targets
