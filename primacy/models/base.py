"""What every model of primacy's tasks shares: TaskModel (the embedding, the stage metrics' bookkeeping and logging,
the optimiser) and ``logs_this_step``, the test of whether a training step's values reach the logger."""

from __future__ import annotations

import inspect
import types
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, ClassVar

import lightning as L
import torch
from torch import nn
from torchmetrics import MeanMetric, Metric

from primacy.backbones.base import Backbone
from primacy.checks import fits_in_memory, positive
from primacy.models.optim import Optimiser

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

    The optimiser is an ``Optimiser`` (``primacy.models.optim``, where its settings lr, betas, eps, weight_decay and
    warmup_steps are described), kept as ``self.optimiser``. A model's constructor takes those settings as
    ``**optimiser`` and hands ``Optimiser(**optimiser)`` (or a subclass with other defaults) to this one, or hands
    ``**optimiser`` on to a parent that does: the CLI then gives it the settings as arguments of its own.

    ``requires`` and ``task_sizes`` are the model's side of the model-task contract: the batch fields it reads in
    training or evaluation (a key, or ``key:what it holds``; see ``primacy.tasks.base.batch_keys``), which the task's
    ``provides`` must cover, and the task settings its own arguments of the same name are linked from, which the task
    must have. A config pairing it with a task that does not fit is refused when it is parsed
    (``primacy.contract.check_pairing``); a model that leaves ``requires`` unset is not checked."""

    METRIC: str  # the stage metrics' attribute suffix: val_accuracy and test_accuracy for METRIC = "accuracy"
    HEADLINE: tuple[str, ...]  # the test results `primacy fit` prints when it ends
    requires: ClassVar[frozenset[str]]  # the batch fields read in training or evaluation
    task_sizes: ClassVar[frozenset[str]] = frozenset()  # task settings linked to arguments of the same name

    def __init__(self, backbone: Backbone, vocab_size: int, optimiser: Optimiser) -> None:
        super().__init__()
        positive(vocab_size=vocab_size)
        fits_in_memory("the embedding", 4 * vocab_size * backbone.d_model, vocab_size=vocab_size,
                       d_model=backbone.d_model)
        self.backbone = backbone
        self.embedding = nn.Embedding(vocab_size, backbone.d_model)
        self.val_loss = MeanMetric().set_dtype(torch.float64)  # loss per answer, summed exactly across processes
        self.test_loss = MeanMetric().set_dtype(torch.float64)
        self.optimiser = optimiser

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
        return self.optimiser.configure(self)

    def save_hyperparameters(self, *args: Any, ignore: Sequence[str] | str | None = None,
                             frame: types.FrameType | None = None, logger: bool = True) -> None:
        """Lightning's, with every optimiser setting in Optimiser's order where the first stands (last of a model's
        arguments), as when each model declared them: those the constructor was not given (a model built in Python
        with their defaults; the CLI gives them all, in order) are added, so hparams, a checkpoint and summary.json hold
        them however the model was built."""
        super().save_hyperparameters(*args, ignore=ignore, frame=frame or inspect.currentframe().f_back, logger=logger)
        if args:  # the caller chose which to save
            return
        ignored = {ignore} if isinstance(ignore, str) else set(ignore or ())
        settings = {name: self.hparams.get(name, value) for name, value in asdict(self.optimiser).items()
                    if name not in ignored}
        items = list(self.hparams.items())
        at = next((i for i, (name, _) in enumerate(items) if name in settings), len(items))
        rest = [(name, value) for name, value in items if name not in settings]
        self.hparams.clear()
        self.hparams.update([*rest[:at], *settings.items(), *rest[at:]])
