"""LanguageModel: embedding -> backbone -> unembedding, trained on next-token prediction (the induction task)."""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

from primacy.backbones.base import Backbone
from primacy.checks import fits_in_memory
from primacy.errors import UsageError
from primacy.metrics import TokenGroupMetrics
from primacy.models.base import logs_this_step
from primacy.models.optim import adamw_warmup_cosine, check_optimiser

Batch = dict[str, torch.Tensor]
GROUPS = ("repeat", "other")  # tokens predictable only by copying from context, and the rest


class LanguageModel(L.LightningModule):
    """Token embedding (V, D), a backbone, and an unembedding Linear(D, V) without bias, trained with cross-entropy
    on every next token. Validation reports loss and accuracy separately on the tokens a model can only predict
    by copying from context (``repeat`` in the batch) and on the others.

    Args:
        backbone: the sequence model (any registered Backbone; the Transformer's attention can be captured).
        vocab_size: V, linked from the task.
        lr, betas, eps, weight_decay, warmup_steps: as for SequenceModel.
    """

    HEADLINE = ("repeat_accuracy", "other_accuracy")  # the test results `primacy fit` prints when it ends

    def __init__(
        self,
        backbone: Backbone,
        vocab_size: int = 128,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.99),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        warmup_steps: int = 200,
    ) -> None:
        super().__init__()
        check_optimiser(lr, betas, eps, weight_decay, warmup_steps)
        if vocab_size < 2:
            raise UsageError(f"vocab_size={vocab_size} is invalid: it must be at least 2")
        fits_in_memory("the embedding and unembedding", 8 * vocab_size * backbone.d_model, vocab_size=vocab_size,
                       d_model=backbone.d_model)
        self.save_hyperparameters(logger=False)  # the loggers get the whole config (RunConfig)
        self.backbone = backbone
        self.embedding = nn.Embedding(vocab_size, backbone.d_model)
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

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        loss, correct = self.token_losses(batch)
        repeat = batch["repeat"][:, 1:]
        if logs_this_step(self._trainer):
            self.log_dict({"train/loss": loss.mean(), "train/repeat_accuracy": correct[repeat].float().mean()},
                          prog_bar=True)
        return loss.mean()

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._update(self.val_metrics, batch)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._update(self.test_metrics, batch)

    def _update(self, metrics: TokenGroupMetrics, batch: Batch) -> None:
        loss, correct = self.token_losses(batch)
        group = (~batch["repeat"][:, 1:]).long()  # B T-1: 0 = repeat, 1 = other (the order of GROUPS)
        metrics.update(loss, correct, group)

    def _log_metrics(self, stage: str, metrics: TokenGroupMetrics) -> None:
        """Computed on every process (the states are summed across them), so the logged values are global."""
        result = metrics.compute()
        for measures, prog_bar in ((("loss", "accuracy"), stage == "val"), (("tokens",), False)):
            self.log_dict({f"{stage}/{g}_{m}": result[f"{g}_{m}"].float() for g in GROUPS for m in measures},
                          prog_bar=prog_bar)
        metrics.reset()

    def on_validation_epoch_end(self) -> None:
        self._log_metrics("val", self.val_metrics)

    def on_test_epoch_end(self) -> None:
        self._log_metrics("test", self.test_metrics)

    def configure_optimizers(self):
        return adamw_warmup_cosine(self)
