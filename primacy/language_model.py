"""LanguageModel: embedding -> backbone -> unembedding, trained on next-token prediction (the induction task)."""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

from primacy.backbones.base import Backbone
from primacy.errors import UsageError
from primacy.optim import adamw_warmup_cosine

Batch = dict[str, torch.Tensor]


class LanguageModel(L.LightningModule):
    """Token embedding (V, D), a backbone, and an unembedding Linear(D, V) without bias, trained with cross-entropy
    on every next token. Validation reports loss and accuracy separately on the tokens a model can only predict
    by copying from context (``repeat`` in the batch) and on the others.

    Args:
        backbone: the sequence model (any registered Backbone; the Transformer's attention can be captured).
        vocab_size: V, linked from the task.
        lr, betas, eps, weight_decay, warmup_steps: as for SequenceModel.
    """

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
        if lr <= 0:
            raise UsageError(f"lr={lr} is invalid: it must be positive")
        if warmup_steps < 0:
            raise UsageError(f"warmup_steps={warmup_steps} is invalid: it must be at least 0")
        if vocab_size < 2:
            raise UsageError(f"vocab_size={vocab_size} is invalid: it must be at least 2")
        self.save_hyperparameters()
        self.backbone = backbone
        self.embedding = nn.Embedding(vocab_size, backbone.d_model)
        self.unembedding = nn.Linear(backbone.d_model, vocab_size, bias=False)

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
        self.log_dict({"train/loss": loss.mean(), "train/repeat_accuracy": correct[repeat].float().mean()},
                      prog_bar=True)
        return loss.mean()

    def _log_prompt_metrics(self, stage: str, batch: Batch) -> None:
        loss, correct = self.token_losses(batch)
        repeat = batch["repeat"][:, 1:]
        self.log_dict({
            f"{stage}/repeat_loss": loss[repeat].mean(), f"{stage}/repeat_accuracy": correct[repeat].float().mean(),
            f"{stage}/other_loss": loss[~repeat].mean(), f"{stage}/other_accuracy": correct[~repeat].float().mean(),
        }, prog_bar=stage == "val", batch_size=len(batch["tokens"]))

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._log_prompt_metrics("val", batch)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._log_prompt_metrics("test", batch)

    def configure_optimizers(self):
        return adamw_warmup_cosine(self)
