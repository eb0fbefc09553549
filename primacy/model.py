"""SequenceModel: embedding -> backbone -> old/new readout, trained on memory verification."""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric

from primacy.backbones.base import Backbone
from primacy.checks import fits_in_memory, positive
from primacy.metrics import StudyQueryAccuracy
from primacy.optim import adamw_warmup_cosine, check_optimiser

Batch = dict[str, torch.Tensor]


class SequenceModel(L.LightningModule):
    """Shared item embedding (K, H) for study and query tokens, a backbone, and a Linear(H, 1) readout at the
    L query positions, trained with binary cross-entropy (old = 1, new = 0).

    Args:
        backbone: the sequence model (any registered Backbone).
        vocab_size: K, linked from the task.
        n_items: L, linked from the task (sizes the accuracy matrices).
        lr: peak learning rate.
        betas, eps, weight_decay: Adam(W) settings (the paper's text: betas 0.9, 0.99).
        warmup_steps: linear warm-up from 0 to ``lr``; then cosine decay to 0 at the trainer's last step.
    """

    HEADLINE = ("overall_accuracy", "early_minus_late")  # the test results `primacy fit` prints when it ends

    def __init__(
        self,
        backbone: Backbone,
        vocab_size: int = 512,
        n_items: int = 32,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.99),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        warmup_steps: int = 1000,
    ) -> None:
        super().__init__()
        check_optimiser(lr, betas, eps, weight_decay, warmup_steps)
        positive(vocab_size=vocab_size, n_items=n_items)
        fits_in_memory("the embedding", 4 * vocab_size * backbone.d_model, vocab_size=vocab_size,
                       d_model=backbone.d_model)
        fits_in_memory("the validation and test accuracy matrices", 2 * 2 * 8 * n_items**2, n_items=n_items)
        self.save_hyperparameters()  # under the CLI the backbone is recorded as its class_path/init_args config
        self.backbone = backbone
        self.embedding = nn.Embedding(vocab_size, backbone.d_model)
        self.readout = nn.Linear(backbone.d_model, 1)
        self.val_accuracy = StudyQueryAccuracy(n_items)
        self.test_accuracy = StudyQueryAccuracy(n_items)
        self.val_loss = MeanMetric().set_dtype(torch.float64)  # BCE per query, summed exactly across processes
        self.test_loss = MeanMetric().set_dtype(torch.float64)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, 2L) -> logits (B, L) at the query positions (positive means "old")."""
        n_items = tokens.shape[1] // 2
        h = self.backbone(self.embedding(tokens))  # B 2L H
        return self.readout(h[:, n_items:]).squeeze(-1)  # B L

    def _loss(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self(batch["tokens"])
        return F.binary_cross_entropy_with_logits(logits.float(), batch["targets"]), logits

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        loss, logits = self._loss(batch)
        if self._logs_this_step():
            acc = ((logits > 0) == batch["targets"].bool()).float().mean()
            self.log_dict({"train/loss": loss, "train/acc": acc}, prog_bar=True)
        return loss

    def _logs_this_step(self) -> bool:
        """Whether this training step's values reach the logger: Lightning writes every ``log_every_n_steps``-th step
        (the values logged in that step), so the others skip self.log, which took 1 ms a step, 5 % of a quickstart
        step on a CPU. The last step logs too, so progress lines and ``callback_metrics`` end with its values."""
        trainer = self._trainer
        if trainer is None:  # called by hand: self.log would only warn
            return False
        step, every = trainer.global_step + 1, trainer.log_every_n_steps  # this step, as Lightning counts it
        return (every > 0 and step % every == 0) or step >= trainer.max_steps or trainer.should_stop

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        loss, logits = self._loss(batch)
        self.val_accuracy.update(logits, batch["targets"], batch["study_pos"])
        self.val_loss.update(loss, weight=batch["targets"].numel())

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        loss, logits = self._loss(batch)
        self.test_accuracy.update(logits, batch["targets"], batch["study_pos"])
        self.test_loss.update(loss, weight=batch["targets"].numel())

    def _log_summary(self, stage: str, metric: StudyQueryAccuracy, loss: MeanMetric) -> None:
        """Computed on every process (the metrics sum their states across them), so the logged values are global."""
        result = metric.compute()
        keys = ("overall_accuracy", "target_accuracy", "distractor_accuracy",
                "primacy_index", "recency_index", "early_minus_late")
        self.log_dict({f"{stage}/loss": loss.compute().float(), **{f"{stage}/{k}": result[k] for k in keys}},
                      prog_bar=stage == "val")
        loss.reset()

    def on_validation_epoch_end(self) -> None:
        self._log_summary("val", self.val_accuracy, self.val_loss)
        self.val_accuracy.reset()

    def on_test_epoch_start(self) -> None:
        self.test_accuracy.reset()

    def on_test_epoch_end(self) -> None:
        # Not reset here: the results writer reads the finished metric at the end of the test.
        self._log_summary("test", self.test_accuracy, self.test_loss)

    def configure_optimizers(self):
        return adamw_warmup_cosine(self)
