"""What every model of primacy's tasks shares: TaskModel (the embedding, the stage metrics' bookkeeping and logging,
the optimiser) and ``logs_this_step``, the test of whether a training step's values reach the logger."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import lightning as L
import torch
from torch import nn
from torchmetrics import MeanMetric, Metric

from primacy.backbones.base import Backbone
from primacy.checks import fits_in_memory, positive
from primacy.models.optim import adamw_warmup_cosine, check_optimiser

Batch = dict[str, torch.Tensor]


def logs_this_step(trainer: L.Trainer | None) -> bool:
    """Whether this training step's values reach the logger: Lightning writes every ``log_every_n_steps``-th step
    (the values logged in that step), so the others skip self.log, which took 1 ms a step, 5 % of a quickstart
    step on a CPU. The last step logs too, so progress lines and ``callback_metrics`` end with its values. Pass the
    module's ``_trainer`` (None when a step is called by hand: self.log would only warn)."""
    if trainer is None:
        return False
    step, every = trainer.global_step + 1, trainer.log_every_n_steps  # this step, as Lightning counts it
    return (every > 0 and step % every == 0) or step >= trainer.max_steps or trainer.should_stop


class TaskModel(L.LightningModule, ABC):
    """What every model of primacy's tasks shares: a token embedding (vocab_size, H) for every input token, a backbone,
    a validation and a test metric (attributes ``val_<METRIC>`` and ``test_<METRIC>``, built by the subclass) with
    their loss means, logging, and the optimiser. A subclass defines ``training_answers`` (the training loss and which
    answers were right), ``_update`` (one evaluation batch into a stage's metric and loss) and ``_summary`` (the
    logged values of a computed metric).

    ``requires`` and ``task_sizes`` are the model's side of the model-task contract: the batch fields it reads in
    training or evaluation (a key, or ``key:what it holds``; see ``primacy.tasks.base.batch_keys``), which the task's
    ``provides`` must cover, and the task settings its own arguments of the same name are linked from, which the task
    must have. A config pairing it with a task that does not fit is refused when it is parsed
    (``primacy.contract.check_pairing``); a model that leaves ``requires`` unset is not checked."""

    METRIC: str  # the stage metrics' attribute suffix: val_accuracy and test_accuracy for METRIC = "accuracy"
    HEADLINE: tuple[str, ...]  # the test results `primacy fit` prints when it ends
    requires: ClassVar[frozenset[str]]  # the batch fields read in training or evaluation
    task_sizes: ClassVar[frozenset[str]] = frozenset()  # task settings linked to arguments of the same name

    def __init__(self, backbone: Backbone, vocab_size: int, lr: float, betas: tuple[float, float], eps: float,
                 weight_decay: float, warmup_steps: int) -> None:
        super().__init__()
        check_optimiser(lr, betas, eps, weight_decay, warmup_steps)
        positive(vocab_size=vocab_size)
        fits_in_memory("the embedding", 4 * vocab_size * backbone.d_model, vocab_size=vocab_size,
                       d_model=backbone.d_model)
        self.backbone = backbone
        self.embedding = nn.Embedding(vocab_size, backbone.d_model)
        self.val_loss = MeanMetric().set_dtype(torch.float64)  # loss per answer, summed exactly across processes
        self.test_loss = MeanMetric().set_dtype(torch.float64)

    @abstractmethod
    def training_answers(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean training loss over the batch's answers and whether each answer is right (bool)."""

    @abstractmethod
    def _update(self, batch: Batch, metric: Metric, loss_mean: MeanMetric) -> None:
        """Scores one evaluation batch into ``metric`` and ``loss_mean``."""

    @abstractmethod
    def _summary(self, metric: Metric) -> dict[str, torch.Tensor | float]:
        """The values logged as <stage>/<name> from ``metric``; its ``compute()`` syncs across processes."""

    def metric(self, stage: str) -> Metric:
        """The metric of ``stage`` (val or test)."""
        return getattr(self, f"{stage}_{self.METRIC}")

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        loss, correct = self.training_answers(batch)
        if logs_this_step(self._trainer):
            self.log_dict({"train/loss": loss, "train/acc": correct.float().mean()}, prog_bar=True)
        return loss

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._update(batch, self.metric("val"), self.val_loss)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._update(batch, self.metric("test"), self.test_loss)

    def _log_summary(self, stage: str) -> None:
        """Computed on every process (the metrics sum their states across them), so the logged values are global."""
        loss = getattr(self, f"{stage}_loss")
        values = self._summary(self.metric(stage))
        self.log_dict({f"{stage}/loss": loss.compute().float(), **{f"{stage}/{k}": v for k, v in values.items()}},
                      prog_bar=stage == "val")
        loss.reset()

    def on_validation_epoch_end(self) -> None:
        self._log_summary("val")
        self.metric("val").reset()

    def on_test_epoch_start(self) -> None:
        self.metric("test").reset()

    def on_test_epoch_end(self) -> None:
        # Not reset here: the results writer reads the finished metric at the end of the test.
        self._log_summary("test")

    def configure_optimizers(self):
        return adamw_warmup_cosine(self)
