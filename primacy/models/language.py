"""LanguageModel: embedding -> backbone -> unembedding, trained on next-token prediction (the induction task)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric

from primacy.backbones.base import Backbone
from primacy.checks import fits_in_memory
from primacy.errors import UsageError
from primacy.metrics import TokenGroupMetrics
from primacy.models.base import Batch, TaskModel
from primacy.models.optim import Optimiser

GROUPS = ("repeat", "other")  # tokens predictable only by copying from context, and the rest


@dataclass(frozen=True)
class LanguageOptimiser(Optimiser):
    """LanguageModel's optimiser: ``Optimiser`` with a shorter warm-up by default, 200 steps."""

    warmup_steps: int = 200


class LanguageModel(TaskModel):
    """Token embedding (V, D), a backbone, and an unembedding Linear(D, V) without bias, trained with cross-entropy
    on every next token. Validation reports loss and accuracy separately on the tokens a model can only predict
    by copying from context (``repeat`` in the batch) and on the others; ``train/acc`` is the accuracy on the
    repeat tokens.

    Args:
        backbone: the sequence model (any registered Backbone; the Transformer's attention can be captured).
        vocab_size: V, linked from the task.
        **optimiser: the optimiser's settings (lr, betas, eps, weight_decay, warmup_steps): ``Optimiser``, with a
            200-step warm-up by default (``LanguageOptimiser``).
    """

    METRIC = "metrics"  # val_metrics and test_metrics: TokenGroupMetrics over GROUPS
    HEADLINE = ("repeat_accuracy", "other_accuracy")  # the test results `primacy fit` prints when it ends
    requires = frozenset({"tokens", "repeat"})  # repeat: where a token is predictable only by copying from context

    def __init__(
        self,
        backbone: Backbone,
        vocab_size: int = 128,
        **optimiser: Any,
    ) -> None:
        if vocab_size < 2:
            raise UsageError(f"vocab_size={vocab_size} is invalid: it must be at least 2")
        super().__init__(backbone, vocab_size, LanguageOptimiser(**optimiser))
        fits_in_memory("the unembedding", 4 * vocab_size * backbone.d_model, vocab_size=vocab_size,
                       d_model=backbone.d_model)
        self.save_hyperparameters(logger=False)  # the loggers get the whole config (RunConfig)
        self.unembedding = nn.Linear(backbone.d_model, vocab_size, bias=False)
        self.val_metrics = TokenGroupMetrics(GROUPS)
        self.test_metrics = TokenGroupMetrics(GROUPS)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) -> next-token logits (B, T, V)."""
        return self.unembedding(self.backbone(self.embedding(tokens)))

    def token_losses(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token cross-entropy and correctness of predicting tokens 1..T-1: (B, T-1) each."""
        logits = self(batch["tokens"])[:, :-1].float()  # B T-1 V
        targets = batch["tokens"][:, 1:]  # B T-1
        loss = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # B T-1
        return loss, logits.argmax(-1) == targets

    def training_answers(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        loss, correct = self.token_losses(batch)
        return loss.mean(), correct[batch["repeat"][:, 1:]]

    def _update(self, batch: Batch, metric: TokenGroupMetrics, loss_mean: MeanMetric) -> None:
        loss, correct = self.token_losses(batch)
        group = (~batch["repeat"][:, 1:]).long()  # B T-1: 0 = repeat, 1 = other (the order of GROUPS)
        metric.update(loss, correct, group)
        loss_mean.update(loss)

    def _summary(self, metric: TokenGroupMetrics) -> dict[str, torch.Tensor | float]:
        return {key: value.float() for key, value in metric.compute().items()}
